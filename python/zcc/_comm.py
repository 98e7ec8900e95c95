"""Communicator: a zcc communicator driven with torch tensors.

Tensors go to C by data_ptr(), element count and datatype; CUDA tensors
also carry the current CUDA stream of their device (or the ``stream`` given),
so GPU calls are stream-ordered as with NCCL and can be captured in a CUDA
graph. Nothing is copied: a non-contiguous tensor or a dtype that zcc does
not reduce is refused with an exception, never staged through a temporary.

The per-call path (all_reduce and siblings) is kept short on purpose: the
C functions are module globals with their argtypes fixed once, the dtype and
op tables are plain dicts built at import, and argument checks are inline
attribute reads. docs/perf/python-overhead.md has the measured cost.
"""
import ctypes
import datetime
import enum
import importlib.util
import itertools
import os
import threading

from . import _lib
from ._lib import (ZccError, UniqueId, Config, check, error,
                   zccAllReduce, zccBroadcast, zccReduce, zccAllGather,
                   zccReduceScatter, zccAlltoAll, zccSend, zccRecv,
                   zccGroupStart, zccGroupEnd)

__all__ = [
    "Communicator", "RedOp", "DataType", "DeviceType", "get_unique_id",
    "group", "group_start", "group_end", "version", "params", "mem_alloc",
    "mem_free", "host_tensor", "dtype_of", "supported_dtypes", "HAVE_MPI",
]


class RedOp(enum.IntEnum):
    """zccRedOp_t."""
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


class DataType(enum.IntEnum):
    """zccDataType_t."""
    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT8E4M3 = 10
    FLOAT8E5M2 = 11


class DeviceType(enum.IntEnum):
    """zccDeviceType_t."""
    AUTO = 0
    HOST = 1
    CUDA = 2


# op -> zccRedOp_t. Ints, RedOp members (equal to their ints) and names.
_OPS = {int(o): int(o) for o in RedOp}
for _o in RedOp:
    _OPS[_o.name.lower()] = int(_o)
_OPS["product"] = int(RedOp.PROD)
_OPS["mean"] = int(RedOp.AVG)

# torch.distributed.ReduceOp names (RedOpType) -> zccRedOp_t
_TORCH_OP_NAMES = {"SUM": 0, "PRODUCT": 1, "MAX": 2, "MIN": 3, "AVG": 4}

# torch.dtype -> zccDataType_t, built when torch is first needed.
_DTYPES = {}
_torch = None


def _import_torch():
    global _torch
    if _torch is not None:
        return _torch
    import torch
    table = {
        torch.int8: DataType.INT8,
        torch.uint8: DataType.UINT8,
        torch.int32: DataType.INT32,
        torch.int64: DataType.INT64,
        torch.float16: DataType.FLOAT16,
        torch.float32: DataType.FLOAT32,
        torch.float64: DataType.FLOAT64,
        torch.bfloat16: DataType.BFLOAT16,
    }
    # Types that only newer torch releases have.
    for name, code in (("uint32", DataType.UINT32), ("uint64", DataType.UINT64),
                       ("float8_e4m3fn", DataType.FLOAT8E4M3),
                       ("float8_e5m2", DataType.FLOAT8E5M2)):
        dt = getattr(torch, name, None)
        if dt is not None:
            table[dt] = code
    _DTYPES.update({k: int(v) for k, v in table.items()})
    _torch = torch
    return torch


def supported_dtypes():
    """The torch dtypes zcc accepts, in zccDataType_t order."""
    _import_torch()
    return sorted(_DTYPES, key=_DTYPES.get)


def dtype_of(tensor):
    """zccDataType_t of a tensor's dtype; TypeError if zcc has none."""
    _import_torch()
    dt = _DTYPES.get(tensor.dtype)
    if dt is None:
        _bad_dtype(tensor)
    return dt


def _bad_dtype(t):
    names = ", ".join(str(d).replace("torch.", "") for d in supported_dtypes())
    raise TypeError("zcc: tensor dtype %s is not supported (zcc reduces: %s)"
                    % (t.dtype, names))


def _bad_layout(t, what):
    if not hasattr(t, "is_contiguous"):
        raise TypeError("zcc: %s must be a torch.Tensor, got %s" % (what, type(t).__name__))
    if t.layout is not _torch.strided:
        raise TypeError("zcc: %s has layout %s; only dense (strided) tensors are supported"
                        % (what, t.layout))
    raise ValueError("zcc: %s is not contiguous (shape %s, stride %s); zcc does not copy "
                     "it into a temporary: pass tensor.contiguous()"
                     % (what, tuple(t.shape), t.stride()))


def _resolve_op(op):
    """Slow path of the op lookup: torch ReduceOp objects and errors."""
    code = _OPS.get(op) if isinstance(op, (int, str)) else None
    if code is not None:
        return code
    if isinstance(op, str):
        code = _OPS.get(op.lower())
        if code is not None:
            return code
    inner = getattr(op, "op", op)  # torch 1.13 ReduceOp wraps a RedOpType
    name = getattr(inner, "name", None)
    if name in _TORCH_OP_NAMES:
        return _TORCH_OP_NAMES[name]
    raise ValueError("zcc: reduction %r is not supported; zcc reduces with sum, prod, "
                     "max, min and avg (bitwise and pre-multiplied sums are not offered)"
                     % (name or op,))


def _timeout_ms(timeout):
    if timeout is None:
        return _lib.CONFIG_UNDEF_INT
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    ms = int(float(timeout) * 1000)
    return max(0, min(ms, 2**31 - 1))


_DEVICE_NAMES = {None: _lib.CONFIG_UNDEF_INT, "auto": 0, "host": 1, "cpu": 1,
                 "cuda": 2, "gpu": 2}


def _make_config(device=None, timeout=None, name=None):
    cfg = Config.new()
    if isinstance(device, str):
        key = device.lower()
        if key not in _DEVICE_NAMES:
            raise ValueError("zcc: device %r: expected 'host', 'cuda' or 'auto'" % device)
        cfg.deviceType = _DEVICE_NAMES[key]
    elif device is not None:
        cfg.deviceType = int(DeviceType(device))
    cfg.timeoutMs = _timeout_ms(timeout)
    if name is not None:
        cfg._name_bytes = name.encode()  # keep the bytes alive with the struct
        cfg.commName = cfg._name_bytes
    return cfg


def get_unique_id():
    """zccGetUniqueId: this process serves the rendezvous of the id."""
    uid = UniqueId()
    check(_lib.zccGetUniqueId(ctypes.byref(uid)), "zccGetUniqueId")
    return uid


def version():
    """Library version as (major, minor, patch)."""
    v = _lib.VERSION_CODE
    return (v // 10000, v // 100 % 100, v % 100)


def params():
    """zcc's ZCC_* parameters: a list of dicts (name, value, default, help)."""
    out = []
    for i in itertools.count():
        name, value, default, helptext = (ctypes.c_char_p() for _ in range(4))
        rc = _lib.zccGetParam(i, ctypes.byref(name), ctypes.byref(value),
                              ctypes.byref(default), ctypes.byref(helptext))
        if rc:
            break
        dec = lambda p: p.value.decode() if p.value is not None else None  # noqa: E731
        out.append({"name": "ZCC_" + dec(name), "value": dec(value),
                    "default": dec(default), "help": dec(helptext)})
    return out


def group_start():
    check(zccGroupStart(), "zccGroupStart")


def group_end():
    check(zccGroupEnd(), "zccGroupEnd")


class group:
    """``with zcc.group(): ...``: zccGroupStart/zccGroupEnd around the block.
    Operations inside are launched together at the end of the block (send and
    recv pairs that would deadlock one by one complete); the tensors they
    use must stay alive until then."""

    def __enter__(self):
        check(zccGroupStart(), "zccGroupStart")
        return self

    def __exit__(self, exc_type, exc, tb):
        rc = zccGroupEnd()
        if rc and exc_type is None:
            raise error(rc, "zccGroupEnd")
        return False


def mem_alloc(nbytes):
    """zccMemAlloc: device memory for zero-copy collectives (GPU only)."""
    p = ctypes.c_void_p()
    check(_lib.zccMemAlloc(ctypes.byref(p), nbytes), "zccMemAlloc")
    return p.value


def mem_free(ptr):
    check(_lib.zccMemFree(ptr), "zccMemFree")


def host_tensor(shape, dtype=None):
    """A CPU tensor (zeroed) in zccMemHostAlloc memory: a host communicator's
    allreduce of 1 MiB or more on such tensors on every rank runs in place,
    reading the peers' inputs and writing their outputs with no staging
    copy. The memory is freed when the last tensor viewing it is gone."""
    import torch
    dtype = dtype or torch.float32
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError("host_tensor: negative size in %r" % (shape,))
    numel = 1
    for s in shape:
        numel *= s
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    p = ctypes.c_void_p()
    check(_lib.zccMemHostAlloc(ctypes.byref(p), max(nbytes, 1)), "zccMemHostAlloc")
    # The block as a ctypes array that owns it (freed with the array);
    # frombuffer keeps the array alive as long as the tensor and its views.
    buf = (ctypes.c_uint8 * max(nbytes, 1)).from_address(p.value)
    buf._zcc_block = _HostBlock(p.value)
    t = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes) if nbytes else \
        torch.empty(0, dtype=torch.uint8)
    if not nbytes:
        del buf  # nothing views it: free the block now
    return t.view(dtype).view(shape)


class _HostBlock:
    """Frees a zccMemHostAlloc block when the last reference goes."""

    def __init__(self, ptr):
        self.ptr = ptr

    def __del__(self):
        try:
            _lib.zccMemHostFree(self.ptr)
        except Exception:  # interpreter shutdown: the process frees it
            pass


HAVE_MPI = importlib.util.find_spec("mpi4py") is not None

_store_seq = itertools.count()
_store_lock = threading.Lock()


class Communicator:
    """One rank of a zcc communicator.

    Create with ``from_env``, ``from_store``, ``from_unique_id``,
    ``from_mpi`` (when mpi4py is installed) or ``init_all``. Collectives take
    contiguous torch tensors; reductions default to in place. Use as a
    context manager to destroy it on exit.
    """

    def __init__(self, handle):
        """Wrap a zccComm_t (an int); use the from_* constructors instead."""
        if not handle:
            raise ValueError("zcc: Communicator needs a non-NULL zccComm_t")
        _import_torch()
        self._h = handle
        v = ctypes.c_int()
        check(_lib.zccCommUserRank(handle, ctypes.byref(v)), "zccCommUserRank", handle)
        self.rank = v.value
        check(_lib.zccCommCount(handle, ctypes.byref(v)), "zccCommCount", handle)
        self.size = v.value
        check(_lib.zccCommCuDevice(handle, ctypes.byref(v)), "zccCommCuDevice", handle)
        self.device = v.value  # CUDA device, -1 on the host
        self.is_cuda = self.device >= 0
        self._barrier_buf = None
        self._held = []  # (event, tensors): pinned CPU tensors the GPU still uses

    # ---- construction -------------------------------------------------

    @classmethod
    def from_unique_id(cls, unique_id, rank, size, device=None, timeout=None, name=None):
        """zccCommInitRankConfig with an id from get_unique_id() (or its
        128 bytes). device: 'host', 'cuda', 'auto' or None (ZCC_DEVICE);
        timeout: seconds or timedelta (None: ZCC_TIMEOUT)."""
        if not isinstance(unique_id, UniqueId):
            unique_id = UniqueId.from_bytes(unique_id)
        cfg = _make_config(device, timeout, name)
        h = ctypes.c_void_p()
        check(_lib.zccCommInitRankConfig(ctypes.byref(h), size, unique_id, rank,
                                         ctypes.byref(cfg)), "zccCommInitRankConfig")
        return cls(h.value)

    @classmethod
    def from_env(cls, device=None, timeout=None, name=None):
        """zccCommInitFromEnv: rank and size from torchrun, mpirun or srun;
        ZCC_COMM_ID=host:port gives the rendezvous address (torchrun:
        MASTER_ADDR and MASTER_PORT+1 by default)."""
        cfg = _make_config(device, timeout, name)
        h = ctypes.c_void_p()
        check(_lib.zccCommInitFromEnv(ctypes.byref(h), ctypes.byref(cfg)),
              "zccCommInitFromEnv")
        return cls(h.value)

    @classmethod
    def from_store(cls, store, rank, size, key=None, device=None, timeout=None, name=None):
        """Exchange the unique id through a torch.distributed Store: rank 0
        calls zccGetUniqueId and sets it under ``key``; the others get it.
        key defaults to 'zcc/unique_id/<n>' with n counting this process's
        from_store calls, so ranks that create communicators in the same
        order agree on it."""
        if key is None:
            with _store_lock:
                key = "zcc/unique_id/%d" % next(_store_seq)
        if rank == 0:
            uid = get_unique_id()
            store.set(key, uid.to_bytes())
        else:
            data = store.get(key)
            uid = UniqueId.from_bytes(data)
        return cls.from_unique_id(uid, rank, size, device, timeout, name)

    if HAVE_MPI:
        @classmethod
        def from_mpi(cls, mpi_comm=None, device=None, timeout=None, name=None):
            """Exchange the unique id with MPI (mpi4py): rank 0 of mpi_comm
            (default COMM_WORLD) creates it and broadcasts it."""
            from mpi4py import MPI
            mc = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
            rank, size = mc.Get_rank(), mc.Get_size()
            data = get_unique_id().to_bytes() if rank == 0 else None
            data = mc.bcast(data, root=0)
            return cls.from_unique_id(data, rank, size, device, timeout, name)

    @classmethod
    def init_all(cls, ndev, devices=None):
        """zccCommInitAll: ndev communicators in this process (host ones,
        or one per CUDA device in ``devices``)."""
        arr = (ctypes.c_void_p * ndev)()
        devlist = None
        if devices is not None:
            if len(devices) != ndev:
                raise ValueError("zcc: init_all: %d devices for %d communicators"
                                 % (len(devices), ndev))
            devlist = (ctypes.c_int * ndev)(*devices)
        check(_lib.zccCommInitAll(arr, ndev, devlist), "zccCommInitAll")
        return [cls(h) for h in arr]

    # ---- lifecycle ----------------------------------------------------

    @property
    def handle(self):
        """The zccComm_t as an int (None once destroyed or aborted)."""
        return self._h

    def _fail(self, rc, fn):
        if self._h is None:
            return ZccError(5, fn, "the communicator was destroyed or aborted")
        return error(rc, fn, self._h)

    def split(self, color, key=None, device=None, timeout=None, name=None):
        """zccCommSplit: ranks with equal color form a new communicator,
        ordered by key (default: this rank). color None: this rank takes part
        in none and gets None. Collective over every rank."""
        color = _lib.SPLIT_NOCOLOR if color is None else int(color)
        key = self.rank if key is None else int(key)
        cfg = None
        if device is not None or timeout is not None or name is not None:
            cfg = ctypes.byref(_make_config(device, timeout, name))
        h = ctypes.c_void_p()
        rc = _lib.zccCommSplit(self._h, color, key, ctypes.byref(h), cfg)
        if rc:
            raise self._fail(rc, "zccCommSplit")
        return Communicator(h.value) if h.value else None

    def finalize(self):
        rc = _lib.zccCommFinalize(self._h)
        if rc:
            raise self._fail(rc, "zccCommFinalize")

    def destroy(self):
        """zccCommDestroy. Later calls on this object raise ZccError."""
        if self._h is None:
            return
        h, self._h = self._h, None
        try:
            check(_lib.zccCommDestroy(h), "zccCommDestroy")
        finally:
            self._drop_held()

    def abort(self):
        """zccCommAbort: operations in progress (also in other threads)
        fail with zccRemoteError; the communicator is freed."""
        if self._h is None:
            return
        h, self._h = self._h, None
        try:
            check(_lib.zccCommAbort(h), "zccCommAbort")
        finally:
            self._drop_held()

    def _drop_held(self):
        """The pinned CPU tensors kept for the GPU (_hold), once it is past them."""
        for ev, _ in self._held:
            ev.synchronize()
        self._held = []

    def async_error(self):
        """zccCommGetAsyncError: 0 (zccSuccess) or the first error met."""
        v = ctypes.c_int()
        rc = _lib.zccCommGetAsyncError(self._h, ctypes.byref(v))
        if rc:
            raise self._fail(rc, "zccCommGetAsyncError")
        return v.value

    def dump(self, path=None):
        """zccCommDump: write the flight recorder (the last operations and
        their state) as JSON to path ("%h", "%p", "%r": host, pid, rank);
        None: ZCC_FLIGHT_RECORDER_FILE. ``zcc_trace report`` reads it."""
        rc = _lib.zccCommDump(self._h, None if path is None else os.fsencode(path))
        if rc:
            raise self._fail(rc, "zccCommDump")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.destroy()
        return False

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None:
            self._h = None
            try:
                _lib.zccCommDestroy(h)
            except Exception:  # interpreter shutdown: the library may be gone
                pass

    def __repr__(self):
        where = "cuda:%d" % self.device if self.is_cuda else "host"
        state = "" if self._h is not None else ", destroyed"
        return "<zcc.Communicator rank %d of %d on %s%s>" % (self.rank, self.size, where,
                                                             state)

    # ---- memory registration ------------------------------------------

    def register(self, tensor):
        """zccCommRegister over a tensor's storage; returns the handle."""
        self._check(tensor, "tensor")
        hdl = ctypes.c_void_p()
        nbytes = tensor.numel() * tensor.element_size()
        rc = _lib.zccCommRegister(self._h, tensor.data_ptr(), nbytes, ctypes.byref(hdl))
        if rc:
            raise self._fail(rc, "zccCommRegister")
        return hdl.value

    def deregister(self, handle):
        rc = _lib.zccCommDeregister(self._h, handle)
        if rc:
            raise self._fail(rc, "zccCommDeregister")

    # ---- argument checks ----------------------------------------------

    def _check(self, t, what):
        """zccDataType_t of t after the dtype, layout and device checks."""
        dt = _DTYPES.get(getattr(t, "dtype", None))
        if dt is None:
            if not hasattr(t, "dtype"):
                raise TypeError("zcc: %s must be a torch.Tensor, got %s"
                                % (what, type(t).__name__))
            _bad_dtype(t)
        if not t.is_contiguous():
            _bad_layout(t, what)
        if self.is_cuda and not t.is_cuda and t.is_pinned():
            return dt  # pinned CPU memory: the GPU reads and writes it in place
        if t.is_cuda is not self.is_cuda or (self.is_cuda and t.get_device() != self.device):
            self._bad_device(t, what)
        return dt

    def _bad_device(self, t, what):
        where = "cuda:%d" % self.device if self.is_cuda else "the host"
        hint = (" (a CPU tensor must be pinned: pin_memory=True or .pin_memory())"
                if self.is_cuda and not t.is_cuda else "")
        raise ValueError("zcc: %s is on %s but this communicator lives on %s%s"
                         % (what, t.device, where, hint))

    def _stream(self, stream, t):
        """The cudaStream_t for a call on t: a CUDA tensor's current stream, or
        for a pinned CPU tensor the current stream of the communicator's GPU
        (synchronize it before reading the result on the host)."""
        if stream is None:
            dev = t.device if t.is_cuda else _torch.device("cuda", self.device)
            return _torch.cuda.current_stream(dev).cuda_stream
        return getattr(stream, "cuda_stream", stream)

    def _hold(self, s, *tensors):
        """Keep the pinned CPU tensors among ``tensors`` (None allowed) until
        the GPU is past this call on stream ``s``. The kernels read and write
        them after the call returns; torch frees a CPU tensor at its last
        reference and its pinned-memory cache hands the block to the next
        pin_memory(), which the kernels would then read or overwrite (a CUDA
        tensor needs none of this: its allocator is ordered by the stream)."""
        pinned = tuple(t for t in tensors if t is not None and not t.is_cuda)
        if not pinned:
            return
        self._held = [h for h in self._held if not h[0].query()]
        ev = _torch.cuda.Event()
        ev.record(_torch.cuda.ExternalStream(s, device=_torch.device("cuda", self.device)))
        self._held.append((ev, pinned))

    def _same(self, a, b, what):
        if b.dtype != a.dtype:
            raise TypeError("zcc: %s has dtype %s, expected %s like the input"
                            % (what, b.dtype, a.dtype))
        if b.numel() != a.numel():
            raise ValueError("zcc: %s has %d elements (shape %s), expected %d like the "
                             "input (shape %s)" % (what, b.numel(), tuple(b.shape),
                                                   a.numel(), tuple(a.shape)))
        self._check(b, what)

    def _blocks(self, big, small, what_big, what_small):
        """big must hold size * small.numel() elements of small's dtype."""
        if big.dtype != small.dtype:
            raise TypeError("zcc: %s has dtype %s but %s has %s"
                            % (what_big, big.dtype, what_small, small.dtype))
        if big.numel() != self.size * small.numel():
            raise ValueError("zcc: %s has %d elements (shape %s); expected %d ranks x %d "
                             "elements of %s (shape %s)"
                             % (what_big, big.numel(), tuple(big.shape), self.size,
                                small.numel(), what_small, tuple(small.shape)))

    # ---- collectives --------------------------------------------------

    def all_reduce(self, tensor, op=RedOp.SUM, out=None, stream=None):
        """zccAllReduce; in place unless ``out`` is given. Returns the result."""
        # The hot path: every check is one or two attribute reads.
        dt = _DTYPES.get(tensor.dtype)
        if dt is None or not tensor.is_contiguous() or tensor.is_cuda is not self.is_cuda:
            dt = self._check(tensor, "tensor")
        code = _OPS.get(op)
        if code is None:
            code = _resolve_op(op)
        if out is None:
            out = tensor
        elif out is not tensor:
            self._same(tensor, out, "out")
        s = None
        if self.is_cuda:
            if tensor.get_device() != self.device and not (not tensor.is_cuda and tensor.is_pinned()):
                self._bad_device(tensor, "tensor")
            s = self._stream(stream, tensor)
        rc = zccAllReduce(tensor.data_ptr(), out.data_ptr(), tensor.numel(), dt, code,
                          self._h, s)
        if rc:
            raise self._fail(rc, "zccAllReduce")
        if s is not None and not (tensor.is_cuda and out.is_cuda):
            self._hold(s, tensor, out)
        return out

    def broadcast(self, tensor, root=0, out=None, stream=None):
        """zccBroadcast from rank ``root``; in place unless ``out`` is given."""
        dt = self._check(tensor, "tensor")
        if out is None:
            out = tensor
        elif out is not tensor:
            self._same(tensor, out, "out")
        s = self._stream(stream, tensor) if self.is_cuda else None
        rc = zccBroadcast(tensor.data_ptr(), out.data_ptr(), tensor.numel(), dt, root,
                          self._h, s)
        if rc:
            raise self._fail(rc, "zccBroadcast")
        if s is not None:
            self._hold(s, tensor, out)
        return out

    def reduce(self, tensor, root=0, op=RedOp.SUM, out=None, stream=None):
        """zccReduce to rank ``root``; the result lands in ``out`` (default:
        tensor, in place) on the root only."""
        dt = self._check(tensor, "tensor")
        code = _OPS.get(op)
        if code is None:
            code = _resolve_op(op)
        if out is None:
            out = tensor
        elif out is not tensor:
            self._same(tensor, out, "out")
        s = self._stream(stream, tensor) if self.is_cuda else None
        rc = zccReduce(tensor.data_ptr(), out.data_ptr(), tensor.numel(), dt, code, root,
                       self._h, s)
        if rc:
            raise self._fail(rc, "zccReduce")
        if s is not None:
            self._hold(s, tensor, out)
        return out

    def all_gather(self, output, input, stream=None):
        """zccAllGather: output (size x input's elements, rank order) gets
        every rank's input. input may be output's own block of this rank.
        output may also be a list of size tensors, one per rank: they are
        filled by grouped send/recv straight from every rank's input."""
        if isinstance(output, (list, tuple)):
            self._check(input, "input")
            outs = self._rank_list(output, input, "output")
            self._sendrecv_blocks(outs, [input] * self.size, stream)
            return output
        dt = self._check(input, "input")
        self._check(output, "output")
        self._blocks(output, input, "output", "input")
        s = self._stream(stream, input) if self.is_cuda else None
        rc = zccAllGather(input.data_ptr(), output.data_ptr(), input.numel(), dt, self._h, s)
        if rc:
            raise self._fail(rc, "zccAllGather")
        if s is not None:
            self._hold(s, input, output)
        return output

    def reduce_scatter(self, output, input, op=RedOp.SUM, stream=None):
        """zccReduceScatter: input holds size blocks of output's elements;
        rank r gets the reduction of every rank's block r. input may also be
        a list of size tensors: then one zccReduce per block, rooted at its
        rank, all in one group (no staging copy)."""
        code = _OPS.get(op)
        if code is None:
            code = _resolve_op(op)
        dt = self._check(output, "output")
        if isinstance(input, (list, tuple)):
            ins = self._rank_list(input, output, "input")
            s = self._stream(stream, output) if self.is_cuda else None
            rc = zccGroupStart()
            if rc:
                raise self._fail(rc, "zccGroupStart")
            failed = None
            for j, blk in enumerate(ins):
                recv = output.data_ptr() if j == self.rank else None
                rc = zccReduce(blk.data_ptr(), recv, blk.numel(), dt, code, j, self._h, s)
                if rc:
                    failed = self._fail(rc, "zccReduce")
                    break
            rc = zccGroupEnd()
            if failed is not None:
                raise failed
            if rc:
                raise self._fail(rc, "zccGroupEnd")
            if s is not None:
                self._hold(s, output, *ins)
            return output
        self._check(input, "input")
        self._blocks(input, output, "input", "output")
        s = self._stream(stream, input) if self.is_cuda else None
        rc = zccReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), dt, code,
                              self._h, s)
        if rc:
            raise self._fail(rc, "zccReduceScatter")
        if s is not None:
            self._hold(s, input, output)
        return output

    def _rank_list(self, tensors, like, what):
        """tensors: one per rank, each of like's dtype and element count."""
        if len(tensors) != self.size:
            raise ValueError("zcc: %s is a list of %d tensors; expected one per rank (%d)"
                             % (what, len(tensors), self.size))
        for j, t in enumerate(tensors):
            self._same(like, t, "%s[%d]" % (what, j))
        return list(tensors)

    def all_to_all(self, output, input, output_split_sizes=None, input_split_sizes=None,
                   stream=None):
        """All-to-all along dim 0. Without split sizes: zccAlltoAll, block j
        of input goes to rank j (equal blocks). With split sizes (rows of
        dim 0 sent to / received from each rank, as torch's
        all_to_all_single): grouped zccSend/zccRecv on the slices, no copy."""
        dt = self._check(input, "input")
        self._check(output, "output")
        if output.dtype != input.dtype:
            raise TypeError("zcc: output has dtype %s but input has %s"
                            % (output.dtype, input.dtype))
        n = self.size
        if not output_split_sizes and not input_split_sizes:
            if input.numel() != output.numel() or input.numel() % n:
                raise ValueError("zcc: all_to_all with equal blocks needs input and output "
                                 "of the same size, a multiple of %d ranks; got %d and %d "
                                 "elements" % (n, input.numel(), output.numel()))
            s = self._stream(stream, input) if self.is_cuda else None
            rc = zccAlltoAll(input.data_ptr(), output.data_ptr(), input.numel() // n, dt,
                             self._h, s)
            if rc:
                raise self._fail(rc, "zccAlltoAll")
            if s is not None:
                self._hold(s, input, output)
            return output
        ins = _row_splits(input, input_split_sizes, n, "input")
        outs = _row_splits(output, output_split_sizes, n, "output")
        self._sendrecv_blocks(outs, ins, stream)
        return output

    def _sendrecv_blocks(self, outs, ins, stream=None):
        """One group: ins[p] to rank p, outs[p] from rank p, for every p
        (None: nothing). Everything is checked before the group opens, so a
        bad argument never leaves a half-issued group behind."""
        calls = []  # (function, name, ptr, count, dtype, peer)
        first = None
        for p in range(self.size):
            i, o = ins[p], outs[p]
            if i is not None:
                calls.append((zccSend, "zccSend", i.data_ptr(), i.numel(),
                              self._check(i, "input"), p))
                first = i if first is None else first
            if o is not None:
                calls.append((zccRecv, "zccRecv", o.data_ptr(), o.numel(),
                              self._check(o, "output"), p))
                first = o if first is None else first
        s = self._stream(stream, first) if self.is_cuda and first is not None else None
        rc = zccGroupStart()
        if rc:
            raise self._fail(rc, "zccGroupStart")
        failed = None
        for fn, name, ptr, count, dt, p in calls:
            rc = fn(ptr, count, dt, p, self._h, s)
            if rc:
                failed = self._fail(rc, name)
                break
        rc = zccGroupEnd()
        if failed is not None:
            raise failed
        if rc:
            raise self._fail(rc, "zccGroupEnd")
        if s is not None:
            self._hold(s, *ins, *outs)

    def gather(self, input, outputs=None, root=0, stream=None):
        """Every rank's input to ``outputs`` (a list of size tensors) on
        ``root``, by grouped send/recv; other ranks pass outputs=None."""
        self._check(input, "input")
        n = self.size
        if not 0 <= root < n:
            raise ValueError("zcc: root %d is out of range [0, %d)" % (root, n))
        ins = [None] * n
        ins[root] = input
        outs = [None] * n
        if self.rank == root:
            if outputs is None:
                raise ValueError("zcc: gather needs a list of %d outputs on the root" % n)
            outs = self._rank_list(outputs, input, "outputs")
        self._sendrecv_blocks(outs, ins, stream)
        return outputs

    def scatter(self, output, inputs=None, root=0, stream=None):
        """Block j of ``inputs`` (a list of size tensors on ``root``) to rank
        j's output, by grouped send/recv; other ranks pass inputs=None."""
        self._check(output, "output")
        n = self.size
        if not 0 <= root < n:
            raise ValueError("zcc: root %d is out of range [0, %d)" % (root, n))
        outs = [None] * n
        outs[root] = output
        ins = [None] * n
        if self.rank == root:
            if inputs is None:
                raise ValueError("zcc: scatter needs a list of %d inputs on the root" % n)
            ins = self._rank_list(inputs, output, "inputs")
        self._sendrecv_blocks(outs, ins, stream)
        return output

    def send(self, tensor, peer, stream=None):
        """zccSend to rank ``peer`` (blocks on the host until it is taken,
        unless issued inside zcc.group())."""
        dt = self._check(tensor, "tensor")
        s = self._stream(stream, tensor) if self.is_cuda else None
        rc = zccSend(tensor.data_ptr(), tensor.numel(), dt, peer, self._h, s)
        if rc:
            raise self._fail(rc, "zccSend")
        if s is not None:
            self._hold(s, tensor)

    def recv(self, tensor, peer, stream=None):
        """zccRecv from rank ``peer`` into tensor."""
        dt = self._check(tensor, "tensor")
        s = self._stream(stream, tensor) if self.is_cuda else None
        rc = zccRecv(tensor.data_ptr(), tensor.numel(), dt, peer, self._h, s)
        if rc:
            raise self._fail(rc, "zccRecv")
        if s is not None:
            self._hold(s, tensor)
        return tensor

    def recv_any(self, tensor):
        """zccRecvAny: the first message from any other rank into tensor;
        returns the sender's rank. Host communicators only, outside
        zcc.group(); see zcc.h for what no rank may send meanwhile."""
        dt = self._check(tensor, "tensor")
        src = ctypes.c_int(-1)
        rc = _lib.zccRecvAny(tensor.data_ptr(), tensor.numel(), dt, ctypes.byref(src),
                             self._h, None)
        if rc:
            raise self._fail(rc, "zccRecvAny")
        return src.value

    def barrier(self, stream=None):
        """Every rank arrives before any leaves: an all-reduce of one element.
        On a GPU communicator it is ordered on the stream like any call."""
        if self._barrier_buf is None:
            dev = "cuda:%d" % self.device if self.is_cuda else "cpu"
            self._barrier_buf = _torch.zeros(1, dtype=_torch.int32, device=dev)
        self.all_reduce(self._barrier_buf, stream=stream)


def _row_splits(t, splits, n, what):
    """n contiguous slices of t along dim 0 (None where a slice is empty)."""
    rows = t.shape[0] if t.dim() else 1
    if not splits:
        if rows % n:
            raise ValueError("zcc: %s has %d rows, not a multiple of %d ranks"
                             % (what, rows, n))
        splits = [rows // n] * n
    splits = [int(x) for x in splits]
    if len(splits) != n or any(x < 0 for x in splits) or sum(splits) != rows:
        raise ValueError("zcc: %s split sizes %s must be %d non-negative numbers adding "
                         "up to its %d rows" % (what, splits, n, rows))
    out, start = [], 0
    for x in splits:
        out.append(t.narrow(0, start, x) if x else None)
        start += x
    return out
