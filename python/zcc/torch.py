"""zcc for torch.distributed: the backend "zcc" and a DDP communication hook.

    import zcc.torch                          # registers the backend
    dist.init_process_group("zcc")            # torchrun, or env:// by hand
    dist.all_reduce(t)

or keep the backend you have and let zcc reduce DDP's gradient buckets:

    model.register_comm_hook(zcc.torch.hook_state(), zcc.torch.allreduce_hook)

The backend is a Python subclass of torch.distributed.ProcessGroup, which
torch 1.13 and 2.x both accept from Backend.register_backend; it answers to
the method names of both (torch 2.15 renamed the single-tensor ones). The unique id
of each zcc communicator goes through the group's c10d store. CPU tensors use
a host communicator created with the group; CUDA tensors a GPU communicator
per device, created at the first CUDA operation of the group (every rank of
the group must take part in that operation, so make it a collective).

Pinned CPU tensors (pin_memory=True) go to the GPU communicator of the
current CUDA device, where a GPU exists: its kernels read and write them in
place, zero copy, on that device's current stream, and the Work's wait()
blocks the host until the GPU is done (the tensor is then the result, as
any CPU operation's is). Every rank must pass a pinned tensor to that
collective (as every rank passes CUDA tensors to a CUDA one).
ZCC_TORCH_PINNED=host keeps them on the host communicator instead. Their
send and recv stay on the host communicator.

Host operations complete before they return, so their Work is already
complete. CUDA operations are enqueued on the current stream of the
tensor's device (zcc's GPU calls never wait on the host), so they can be
captured with torch.cuda.graph; their Work is NCCL's: wait() makes the
then-current stream wait for the operation's end (an event), not the host;
is_completed() asks the GPU; get_future() is a CUDA-aware future. barrier()
runs on the host communicator once the work queued on the rank's current
CUDA streams has run, so it also leaves only then, as NCCL's does. Several
processes may share one GPU (each sets its device, e.g. LOCAL_RANK %
torch.cuda.device_count()); the group's GPU communicator then connects them
through CUDA IPC, or through pinned shared memory with ZCC_P2P_DISABLE=1.

Point-to-point operations (send, recv, isend, irecv, batch_isend_irecv) are
queued and issued together, as one zcc group, when a Work of theirs is
waited on or the group's next other operation starts: an isend and an irecv
that would block each other one by one both complete. Queued CUDA ones are
ordered on the stream that was current when they were queued, as NCCL
orders them. On CPU tensors they run on a host communicator of their own,
as gloo keeps point-to-point messages apart from collectives by tag: a rank
that sends and moves on to a collective never has its collective's data
taken for a message, and a receive from any source (recv without src,
zccRecvAny) sees only messages. That receive completes before recv/irecv
returns; it refuses CUDA tensors (GPU communicators cannot receive from any
source).
"""
import ctypes
import inspect
import os
import threading

import torch
import torch.distributed as dist

from ._comm import Communicator, RedOp, _resolve_op
from .trace import step, compute  # markers for zcc_trace heatmap (ZCC_TRACE_FILE)

__all__ = ["ProcessGroupZcc", "allreduce_hook", "hook_state", "HookState",
           "BACKEND_NAME", "step", "compute"]

BACKEND_NAME = "zcc"

try:
    _work_from_future = torch._C._distributed_c10d._create_work_from_future
except AttributeError:  # pragma: no cover - every torch this supports has it
    _work_from_future = None


def _completed(result):
    """A Work that is already complete, whose future holds ``result``."""
    fut = torch.futures.Future()
    fut.set_result(result)
    if _work_from_future is not None:
        return _work_from_future(fut)
    return _DoneWork(fut)


_pinned_policy = None


def _pinned_on_gpu(t):
    """Whether the CPU tensor t goes to the GPU communicator: it is pinned,
    a GPU exists, and ZCC_TORCH_PINNED is not "host"."""
    global _pinned_policy
    if t is None or t.is_cuda or not t.is_pinned():
        return False
    if _pinned_policy is None:
        v = os.environ.get("ZCC_TORCH_PINNED", "gpu").strip().lower()
        if v not in ("gpu", "host"):
            raise ValueError("ZCC_TORCH_PINNED=%r: expected gpu or host" % v)
        _pinned_policy = v == "gpu" and torch.cuda.is_available()
    return _pinned_policy


def _work(result, t):
    """The Work of an operation on tensor t that has been issued: complete
    on the host, or enqueued on t's device's current stream (_CudaWork),
    or, for a pinned CPU tensor on the GPU, on the current device's
    (_PinnedWork: wait() blocks the host)."""
    if t is not None and t.is_cuda:
        return _CudaWork(result, torch.cuda.current_stream(t.device))
    if _pinned_on_gpu(t):
        return _PinnedWork(result, torch.cuda.current_stream())
    return _completed(result)


class _DoneWork(dist.Work):
    def __init__(self, fut):
        super().__init__()
        self._fut = fut

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def get_future(self):
        return self._fut

    def result(self):
        return self._fut.value()


def _capturing(device):
    """Whether device's current stream is capturing a CUDA graph."""
    if device.index == torch.cuda.current_device():
        return torch.cuda.is_current_stream_capturing()
    with torch.cuda.device(device):
        return torch.cuda.is_current_stream_capturing()


class _StreamMark:
    """A point on a CUDA stream: an event recorded there. Right after zcc
    enqueued an operation, it is where the operation ends (as WorkNCCL's
    end event); when a send or recv is queued, where it must start."""

    __slots__ = ("stream", "device", "event", "captured")

    def __init__(self, stream):
        self.stream = stream
        self.device = stream.device
        # Inside torch.cuda.graph the record is a node of the capture: it can
        # be waited on inside the same capture only, and never queried.
        self.captured = _capturing(self.device)
        self.event = torch.cuda.Event()
        self.event.record(stream)

    def wait(self):
        """The caller's current stream (of the op's device) waits for the
        operation; the host does not block."""
        cur = torch.cuda.current_stream(self.device)
        if self.captured and not _capturing(self.device):
            return  # the graph orders its own nodes; outside it there is nothing to wait for
        if cur != self.stream:
            cur.wait_event(self.event)

    def done(self):
        return True if self.captured else self.event.query()

    def synchronize(self):
        if not self.captured:
            self.event.synchronize()

    def future(self, result):
        """A CUDA-aware future completed on the op's stream: its wait() and
        then() make the waiter's stream wait, as NCCL's futures do."""
        fut = torch.futures.Future(devices=[self.device])
        with torch.cuda.stream(self.stream):
            fut.set_result(result)
        return fut


class _CudaWork(dist.Work):
    """Work of a collective that zcc enqueued on the caller's current CUDA
    stream (the host did not wait for it). As ProcessGroupNCCL's work:
    wait() and synchronize() make the current stream wait for the
    operation's end (the same stream: nothing to do), is_completed() asks
    the GPU, get_future() is a CUDA-aware future, and the result is the
    tensors."""

    def __init__(self, result, stream):
        super().__init__()
        self._result = result
        self._mark = _StreamMark(stream)
        self._fut = None

    def wait(self, timeout=None):
        self._mark.wait()
        return True

    def synchronize(self):
        self._mark.wait()

    def is_completed(self):
        return self._mark.done()

    def is_success(self):
        return self._mark.done()

    def exception(self):
        return None

    def result(self):
        return self._result

    def get_future(self):
        if self._fut is None:
            self._fut = self._mark.future(self._result)
        return self._fut


class _PinnedWork(_CudaWork):
    """Work of a collective on pinned CPU tensors that the GPU runs in
    place: the tensors are host memory, read by the host, so wait() and
    synchronize() block the host until the operation's end (inside a CUDA
    graph capture there is no end to wait for: the graph orders it)."""

    def wait(self, timeout=None):
        self._mark.synchronize()
        return True

    def synchronize(self):
        self._mark.synchronize()

    def get_future(self):
        if self._fut is None:
            self._mark.synchronize()
            self._fut = torch.futures.Future()
            self._fut.set_result(self._result)
        return self._fut


class _P2PWork(dist.Work):
    """Work of a queued send or recv: waiting on it issues the queue. On
    CUDA tensors the queue is enqueued on the current stream then, and the
    Work then behaves as _CudaWork (the stream waits, not the host)."""

    def __init__(self, pg, tensor):
        super().__init__()
        self._pg = pg
        self._tensor = tensor
        self._done = False
        self._error = None
        self._mark = None  # _StreamMark of the flush, for CUDA tensors

    def wait(self, timeout=None):
        if not self._done:
            self._pg._flush()
        if self._error is not None:
            raise self._error
        if self._mark is not None:
            self._mark.wait()
        return True

    def is_completed(self):
        return self._done and (self._mark is None or self._mark.done())

    def is_success(self):
        return self.is_completed() and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return [self._tensor]

    def get_future(self):
        self.wait()
        if self._mark is not None:
            return self._mark.future([self._tensor])
        fut = torch.futures.Future()
        fut.set_result([self._tensor])
        return fut

    def synchronize(self):
        self.wait()

    def _source_rank(self):
        raise RuntimeError("zcc backend: _source_rank() is only defined for receives "
                           "from any source (recv or irecv without src)")

    source_rank = _source_rank


class _AnySourceWork(dist.Work):
    """Work of a completed receive from any source: _source_rank() is the
    sender's rank in the group, as torch's recv and irecv read it."""

    def __init__(self, tensor, src):
        super().__init__()
        self._tensor = tensor
        self._src = src

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def result(self):
        return [self._tensor]

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result([self._tensor])
        return fut

    def _source_rank(self):
        return self._src

    def source_rank(self):
        return self._src


def _one(tensors, what="tensors"):
    """torch's process group API passes lists (one tensor per device); zcc
    runs one device per rank."""
    if len(tensors) != 1:
        raise ValueError("zcc backend: %s holds %d tensors; zcc takes one tensor per "
                         "process (one device per rank)" % (what, len(tensors)))
    return tensors[0]


def _op(opts):
    return _resolve_op(opts.reduceOp) if opts is not None else int(RedOp.SUM)


def _views_of_one_buffer(tensors):
    """True when tensors are consecutive, equal, contiguous pieces of one
    buffer, so a collective can run on the whole buffer in place."""
    if not tensors or not all(t.is_contiguous() for t in tensors):
        return False
    nbytes = tensors[0].numel() * tensors[0].element_size()
    base = tensors[0].data_ptr()
    return all(t.dtype == tensors[0].dtype and t.numel() == tensors[0].numel()
               and t.data_ptr() == base + j * nbytes for j, t in enumerate(tensors))


def _whole(tensors):
    """The flat buffer that consecutive views (see above) cover."""
    t0 = tensors[0]
    return t0.as_strided((t0.numel() * len(tensors),), (1,))


class ProcessGroupZcc(dist.ProcessGroup):
    """The torch.distributed backend "zcc"."""

    def __init__(self, store, rank, size, timeout=None):
        super().__init__(rank, size)
        self._store = store
        self._timeout = timeout
        self._seq = 0
        self._lock = threading.Lock()
        self._pending = []  # queued point-to-point: (is_recv, tensor, peer, work, comm, at)
        self._cuda = {}  # CUDA device index -> Communicator or the error it met
        self._group_name = ""
        self._group_desc = ""
        self._host = self._new_comm("host")
        self._p2p = self._new_comm("host")  # send and recv of CPU tensors

    # ---- communicators --------------------------------------------------

    def _new_comm(self, device):
        key = "zcc/comm/%d" % self._seq
        self._seq += 1
        return Communicator.from_store(self._store, self.rank(), self.size(), key=key,
                                       device=device, timeout=self._timeout,
                                       name="torch-pg-%s" % device)

    def _comm(self, t):
        if not t.is_cuda:
            if not _pinned_on_gpu(t):
                return self._host
            idx = torch.cuda.current_device()  # pinned: the current GPU, zero copy
        else:
            idx = t.get_device()
        c = self._cuda.get(idx)
        if c is None:
            try:
                with torch.cuda.device(idx):
                    c = self._new_comm("cuda")
            except Exception as e:
                c = RuntimeError("zcc backend: cannot create a GPU communicator for "
                                 "cuda:%d: %s" % (idx, e))
            self._cuda[idx] = c
        if isinstance(c, Exception):
            raise c
        return c

    def communicator(self, device="cpu"):
        """The zcc Communicator this group uses for tensors on ``device``."""
        return self._comm(torch.empty(0, device=device))

    # What torch 2.x reads off a group's backend (see _get_backend): no
    # communicator splitting through torch (new_group builds new zcc
    # communicators), no NCCL-style coalescing manager (send and recv are
    # queued and issued as one zcc group anyway).
    supports_splitting = False
    supports_coalescing = False

    def _get_backend(self, device):
        """This group serves every device itself. torch 2.15 asks the group
        for its backend in batch_isend_irecv (supports_coalescing), in
        init_process_group(device_id=...) (supports_splitting) and in
        new_group."""
        return self

    def getBackendName(self):
        return BACKEND_NAME

    # ---- group identity -------------------------------------------------
    # torch 2.x names every group it makes (_set_group_name and
    # _set_group_desc in init_process_group and new_group) and finds groups
    # by name: destroy_process_group, and the functional collectives
    # (torch.ops._c10d_functional) that DTensor and FSDP2 run on. Its C++
    # side reaches a Python group through getGroupName/setGroupName/
    # getGroupDesc/setGroupDesc; Python code uses the other names. torch
    # 1.13 names no group: both stay "", like a c10d backend's before it is
    # named.

    def _set_group_name(self, name):
        self._group_name = str(name)

    def _set_group_desc(self, desc):
        self._group_desc = str(desc)

    @property
    def group_name(self):
        return self._group_name

    @property
    def group_desc(self):
        return self._group_desc

    def setGroupName(self, name):
        self._set_group_name(name)

    def getGroupName(self):
        return self._group_name

    def setGroupDesc(self, desc):
        self._set_group_desc(desc)

    def getGroupDesc(self):
        return self._group_desc

    def name(self):
        return BACKEND_NAME

    def shutdown(self):
        """Destroy the zcc communicators (torch calls this on destroy)."""
        self._flush()
        for c in list(self._cuda.values()) + [self._host, self._p2p]:
            if isinstance(c, Communicator):
                c.destroy()

    def __repr__(self):
        return "<ProcessGroupZcc rank %d of %d>" % (self.rank(), self.size())

    # ---- collectives ----------------------------------------------------

    def allreduce(self, tensors, opts=None):
        if self._pending:
            self._flush()
        t = _one(tensors)
        self._comm(t).all_reduce(t, _op(opts))
        return _work(tensors, t)

    def allreduce_coalesced(self, tensors, opts=None):
        if self._pending:
            self._flush()
        op = _op(opts)
        if tensors:
            comm = self._comm(tensors[0])
            for t in tensors:  # refuse bad tensors before the group opens
                comm._check(t, "tensor")
            with _Group():
                for t in tensors:
                    comm.all_reduce(t, op)
        return _work(tensors, tensors[0] if tensors else None)

    def broadcast(self, tensors, opts=None):
        if self._pending:
            self._flush()
        t = _one(tensors)
        root = opts.rootRank if opts is not None else 0
        self._comm(t).broadcast(t, root)
        return _work(tensors, t)

    def reduce(self, tensors, opts=None):
        if self._pending:
            self._flush()
        t = _one(tensors)
        root = opts.rootRank if opts is not None else 0
        self._comm(t).reduce(t, root, _op(opts))
        return _work(tensors, t)

    def allgather(self, output_tensors, input_tensors, opts=None):
        if self._pending:
            self._flush()
        outs = _one(output_tensors, "output_tensors")
        inp = _one(input_tensors, "input_tensors")
        comm = self._comm(inp)
        if len(outs) == self.size() and _views_of_one_buffer(outs) and \
                outs[0].numel() == inp.numel() and outs[0].dtype == inp.dtype:
            comm.all_gather(_whole(outs), inp)
        else:
            comm.all_gather(outs, inp)
        return _work(output_tensors, inp)

    def _allgather_base(self, output, input, opts=None):
        if self._pending:
            self._flush()
        self._comm(input).all_gather(output, input)
        return _work([output], input)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        if self._pending:
            self._flush()
        if inputs:
            comm = self._comm(inputs[0])
            for o, i in zip(outputs, inputs):
                comm._check(o, "output")
                comm._blocks(o, i, "output", "input")
            with _Group():
                for o, i in zip(outputs, inputs):
                    comm.all_gather(o, i)
        return _work(outputs, inputs[0] if inputs else None)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        """output_lists[r][i] gets rank r's input_list[i], for every i: the
        all-gathers of every input, as one zcc group (every tensor is
        checked before it opens)."""
        if self._pending:
            self._flush()
        n = self.size()
        if len(output_lists) != n:
            raise ValueError("zcc backend: all_gather_coalesced needs one output list per "
                             "rank (%d), got %d" % (n, len(output_lists)))
        for r, outs in enumerate(output_lists):
            if len(outs) != len(input_list):
                raise ValueError("zcc backend: all_gather_coalesced: output_lists[%d] holds "
                                 "%d tensors for %d inputs" % (r, len(outs), len(input_list)))
        if input_list:
            comm = self._comm(input_list[0])
            blocks = []
            for i, inp in enumerate(input_list):
                comm._check(inp, "input_list[%d]" % i)
                blocks.append(comm._rank_list([output_lists[r][i] for r in range(n)], inp,
                                              "output_lists[*][%d]" % i))
            with _Group():
                for inp, outs in zip(input_list, blocks):
                    comm._sendrecv_blocks(outs, [inp] * n)
        return _work(output_lists, input_list[0] if input_list else None)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        if self._pending:
            self._flush()
        out = _one(output_tensors, "output_tensors")
        ins = _one(input_tensors, "input_tensors")
        comm = self._comm(out)
        if len(ins) == self.size() and _views_of_one_buffer(ins) and \
                ins[0].numel() == out.numel() and ins[0].dtype == out.dtype:
            comm.reduce_scatter(out, _whole(ins), _op(opts))
        else:
            comm.reduce_scatter(out, ins, _op(opts))
        return _work(output_tensors, out)

    def _reduce_scatter_base(self, output, input, opts=None):
        if self._pending:
            self._flush()
        self._comm(input).reduce_scatter(output, input, _op(opts))
        return _work([output], input)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        if self._pending:
            self._flush()
        op = _op(opts)
        if inputs:
            comm = self._comm(inputs[0])
            for o, i in zip(outputs, inputs):
                comm._check(i, "input")
                comm._blocks(i, o, "input", "output")
            with _Group():
                for o, i in zip(outputs, inputs):
                    comm.reduce_scatter(o, i, op)
        return _work(outputs, inputs[0] if inputs else None)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes,
                      opts=None):
        if self._pending:
            self._flush()
        self._comm(input).all_to_all(output, input, list(output_split_sizes or []),
                                     list(input_split_sizes or []))
        return _work([output], input)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        if self._pending:
            self._flush()
        n = self.size()
        if len(output_tensors) != n or len(input_tensors) != n:
            raise ValueError("zcc backend: all_to_all needs %d input and %d output tensors, "
                             "got %d and %d" % (n, n, len(input_tensors), len(output_tensors)))
        dtypes = {t.dtype for t in list(input_tensors) + list(output_tensors)}
        if len(dtypes) > 1:
            raise TypeError("zcc backend: all_to_all tensors mix dtypes %s"
                            % sorted(str(d) for d in dtypes))
        comm = self._comm(input_tensors[0])
        comm._sendrecv_blocks([t if t.numel() else None for t in output_tensors],
                              [t if t.numel() else None for t in input_tensors])
        return _work(output_tensors, input_tensors[0])

    def gather(self, output_tensors, input_tensors, opts=None):
        if self._pending:
            self._flush()
        inp = _one(input_tensors, "input_tensors")
        root = opts.rootRank if opts is not None else 0
        outs = _one(output_tensors, "output_tensors") if self.rank() == root else None
        self._comm(inp).gather(inp, outs, root)
        return _work(output_tensors, inp)

    def scatter(self, output_tensors, input_tensors, opts=None):
        if self._pending:
            self._flush()
        out = _one(output_tensors, "output_tensors")
        root = opts.rootRank if opts is not None else 0
        ins = _one(input_tensors, "input_tensors") if self.rank() == root else None
        self._comm(out).scatter(out, ins, root)
        return _work(output_tensors, out)

    # ---- the single-tensor names of torch 2.15 and later ------------------
    # torch 2.15 calls these instead of _allgather_base, _reduce_scatter_base,
    # alltoall_base and the *_tensor_coalesced methods, and adds gather_single
    # (dist.gather_single: one output tensor on the root).

    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes,
                                  opts)

    def gather_single(self, output, input, opts=None):
        """Every rank's input into ``output`` (size x input's elements, rank
        order) on the root; other ranks' output is ignored."""
        if self._pending:
            self._flush()
        root = opts.rootRank if opts is not None else 0
        comm = self._comm(input)
        outs = None
        if self.rank() == root:
            comm._check(output, "gather_tensor")
            comm._blocks(output, input, "gather_tensor", "tensor")
            flat = output.view(-1)
            k = input.numel()
            outs = [flat[j * k:(j + 1) * k].view(input.shape) for j in range(self.size())]
        comm.gather(input, outs, root)
        return _work([output], input)

    def barrier(self, opts=None):
        """Every rank arrives before any leaves, on the host communicator.
        As NCCL's barrier (an all-reduce whose wait blocks the host), a rank
        arrives once the work it enqueued on its current CUDA streams has
        run: the devices it has GPU communicators on are synchronized first."""
        self._flush()
        for idx, c in self._cuda.items():
            if isinstance(c, Communicator) and not _capturing(torch.device("cuda", idx)):
                torch.cuda.current_stream(idx).synchronize()
        self._host.barrier()
        return _completed([])

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        raise RuntimeError("zcc backend: monitored_barrier is a gloo feature; use barrier")

    # ---- point to point -------------------------------------------------

    def send(self, tensors, dstRank, tag=0):
        return self._queue(False, _one(tensors), dstRank)

    def recv(self, tensors, srcRank, tag=0):
        return self._queue(True, _one(tensors), srcRank)

    def recv_anysource(self, tensors, tag=0):
        """The first message from any rank of the group into the tensor
        (zccRecvAny on the point-to-point communicator); the Work's
        _source_rank() is its sender. Queued sends and receives go first."""
        t = _one(tensors)
        if t.is_cuda:
            raise RuntimeError("zcc backend: receiving from any source is not supported "
                               "for CUDA tensors (GPU communicators cannot); give recv a "
                               "src rank")
        from ._lib import zccRecvAny
        comm = self._p2p
        dt = comm._check(t, "tensor")
        if self._pending:
            self._flush()
        src = ctypes.c_int(-1)
        rc = zccRecvAny(t.data_ptr(), t.numel(), dt, ctypes.byref(src), comm._h, None)
        if rc:
            raise comm._fail(rc, "zccRecvAny")
        return _AnySourceWork(t, src.value)

    def _p2p_comm(self, t):
        return self._comm(t) if t.is_cuda else self._p2p

    def _queue(self, is_recv, t, peer):
        comm = self._p2p_comm(t)
        comm._check(t, "tensor")  # refuse a bad tensor now, not at the flush
        if not 0 <= peer < self.size():
            raise ValueError("zcc backend: peer %d is out of range [0, %d)"
                             % (peer, self.size()))
        work = _P2PWork(self, t)
        # A CUDA op is issued later, at the flush, but ordered as if issued
        # now (as NCCL orders it): after what the current stream holds.
        at = _StreamMark(torch.cuda.current_stream(t.device)) if comm.is_cuda else None
        with self._lock:
            self._pending.append((is_recv, t, peer, work, comm, at))
        return work

    def _flush(self):
        """Issue every queued send and recv as one zcc group. The CUDA ones
        of a device go on the stream that was current when the first of
        them was queued, once every other's queue-time stream reached the
        point where it was queued; each Work then marks the group's end on
        that stream (the waiter's stream waits for it)."""
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        from ._lib import zccSend, zccRecv
        streams = {}  # CUDA device index -> the stream its ops are issued on
        for _, _, _, _, comm, at in pending:
            if at is None:
                continue
            s = streams.get(comm.device)
            if s is None:
                streams[comm.device] = at.stream
            elif at.stream != s:
                s.wait_event(at.event)
        err = None
        with _Group() as g:
            for is_recv, t, peer, work, comm, at in pending:
                s = streams[comm.device].cuda_stream if at is not None else None
                fn = zccRecv if is_recv else zccSend
                rc = fn(t.data_ptr(), t.numel(), comm._check(t, "tensor"), peer, comm._h, s)
                if rc:
                    err = comm._fail(rc, "zccRecv" if is_recv else "zccSend")
                    break
            g.error = err
        err = err or g.end_error
        marks = {dev: _StreamMark(s) for dev, s in streams.items()} if err is None else {}
        for _, _, _, work, comm, at in pending:
            work._done = True
            work._error = err
            if at is not None:
                work._mark = marks.get(comm.device)
        if err is not None:
            raise err

    def _start_coalescing(self, *args):
        # Queued point-to-point already coalesces; the queue is issued at the end.
        return None

    def _end_coalescing(self, *args):
        self._flush()
        return _completed([])


class _Group:
    """zccGroupStart/End; an error inside the block wins over the end's."""

    def __init__(self):
        self.error = None
        self.end_error = None

    def __enter__(self):
        from ._lib import zccGroupStart, check
        check(zccGroupStart(), "zccGroupStart")
        return self

    def __exit__(self, exc_type, exc, tb):
        from ._lib import zccGroupEnd, error
        rc = zccGroupEnd()
        if rc:
            self.end_error = error(rc, "zccGroupEnd")
            if exc_type is None and self.error is None:
                raise self.end_error
        return False


def _create_backend(store, rank, size, timeout):
    return ProcessGroupZcc(store, rank, size, timeout)


def _register():
    plugins = getattr(dist.Backend, "_plugins", {})
    if BACKEND_NAME.upper() in plugins:
        return
    kwargs = {}
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        kwargs["devices"] = ["cpu", "cuda"]
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, **kwargs)


_register()


# ---- DDP communication hook ------------------------------------------------

class HookState:
    """What allreduce_hook reduces with: zcc communicators over a torch store,
    one per device type, created on first use (every rank's first bucket)."""

    def __init__(self, store, rank, size, timeout=None):
        self._store, self.rank, self.size, self._timeout = store, rank, size, timeout
        self._comms = {}
        self._seq = 0

    def comm_for(self, t):
        key = t.get_device() if t.is_cuda else None
        c = self._comms.get(key)
        if c is None:
            skey = "zcc/hook/%d" % self._seq
            self._seq += 1
            device = "cuda" if t.is_cuda else "host"
            if t.is_cuda:
                with torch.cuda.device(key):
                    c = Communicator.from_store(self._store, self.rank, self.size, key=skey,
                                                device=device, timeout=self._timeout)
            else:
                c = Communicator.from_store(self._store, self.rank, self.size, key=skey,
                                            device=device, timeout=self._timeout)
            self._comms[key] = c
        return c

    def destroy(self):
        for c in self._comms.values():
            c.destroy()
        self._comms.clear()


def hook_state(group=None):
    """State for allreduce_hook over the default process group (whatever its
    backend): zcc communicators whose unique ids go through its store. For a
    group of backend "zcc", the group itself is returned (its communicators
    are used). For another group, pass a zcc.Communicator as the state."""
    if isinstance(group, ProcessGroupZcc):
        return group
    if group is not None and group is not dist.distributed_c10d._get_default_group():
        raise ValueError("zcc: hook_state(group) takes the default group or a group of "
                         "backend 'zcc'; for another group pass a zcc.Communicator as the "
                         "hook's state")
    if not dist.is_initialized():
        raise RuntimeError("zcc: hook_state() needs torch.distributed initialised "
                           "(dist.init_process_group) first")
    default = dist.distributed_c10d._get_default_group()
    if isinstance(default, ProcessGroupZcc):
        return default
    store = dist.distributed_c10d._get_default_store()
    return HookState(store, dist.get_rank(), dist.get_world_size())


_default_state = None
_hook_streams = {}  # CUDA device index -> the side stream the hook reduces on


def _hook_stream(device):
    s = _hook_streams.get(device.index)
    if s is None:
        s = _hook_streams[device.index] = torch.cuda.Stream(device)
    return s


def allreduce_hook(state, bucket):
    """DDP communication hook: average the gradient bucket over every rank
    with one zcc all-reduce (zccAvg: the sum divided by the number of ranks,
    as DDP's default). ``state``: a zcc.Communicator, a ProcessGroupZcc, the
    result of hook_state(), or None (hook_state() of the default group,
    created at the first bucket).

    CPU buckets are reduced before the hook returns a completed future.
    CUDA buckets, as NCCL's hook: the all-reduce is enqueued on a side
    stream of the device that first waits for the current stream (where
    backward produced the bucket), and the future is completed on that side
    stream, so DDP's wait makes its stream wait for the reduction rather
    than the host. backward goes on while the bucket is reduced, and each
    bucket's reduction starts as soon as DDP hands it over. (The CUDA path
    has not run on a GPU yet.)"""
    global _default_state
    buf = bucket.buffer()
    if state is None:
        if _default_state is None:
            _default_state = hook_state()
        state = _default_state
    if isinstance(state, Communicator):
        comm = state
    elif isinstance(state, ProcessGroupZcc):
        comm = state._comm(buf)
    elif isinstance(state, HookState):
        comm = state.comm_for(buf)
    else:
        raise TypeError("zcc: allreduce_hook state must be a zcc.Communicator, a zcc "
                        "process group, zcc.torch.hook_state() or None; got %s"
                        % type(state).__name__)
    if not buf.is_cuda:
        comm.all_reduce(buf, RedOp.AVG)
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut
    side = _hook_stream(buf.device)
    side.wait_stream(torch.cuda.current_stream(buf.device))
    with torch.cuda.stream(side):
        comm.all_reduce(buf, RedOp.AVG, stream=side)
        buf.record_stream(side)  # the caching allocator keeps buf until side is past it
        # A CUDA-aware future: set_result records an event on side (the
        # current stream here); wait() and then() make the waiter's stream
        # wait for that event.
        fut = torch.futures.Future(devices=[buf.device])
        fut.set_result(buf)
    return fut
