"""ctypes bindings over the whole C API of libzcc (include/zcc.h).

Every function is declared once with argtypes and restype; the objects
stay bound to module globals so that the hot path does a single attribute
load and no per-call setup. Results are plain ints (zccResult_t);
``check`` turns a non-zero one into a ``ZccError`` that carries
``zccGetLastError()``.

Where the library comes from, first hit wins:
  1. the ZCC_LIBRARY environment variable (a path to libzcc.so),
  2. libzcc.so inside this package's directory (``pip install`` copies it
     there when it finds one at build time),
  3. the repository's build tree: <repo>/build/src/libzcc.so, when this
     package is used from a source checkout,
  4. the system loader's search path (ldconfig, LD_LIBRARY_PATH).
"""
import ctypes
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_int, c_size_t,
                    c_uint, c_void_p)

__all__ = [
    "LIB", "LIB_PATH", "ZccError", "UniqueId", "Config", "check",
    "RESULT_NAMES", "UNIQUE_ID_BYTES", "CONFIG_MAGIC", "CONFIG_UNDEF_INT",
    "SPLIT_NOCOLOR", "library_search_path",
]

UNIQUE_ID_BYTES = 128
CONFIG_MAGIC = 0x7A636366
CONFIG_UNDEF_INT = -(2**31)
SPLIT_NOCOLOR = -1

# zccResult_t, in the order of ZCC_RESULT_MAP.
RESULT_NAMES = {
    0: "zccSuccess",
    1: "zccUnhandledCudaError",
    2: "zccSystemError",
    3: "zccInternalError",
    4: "zccInvalidArgument",
    5: "zccInvalidUsage",
    6: "zccRemoteError",
    7: "zccInProgress",
    8: "zccTimeout",
}


class UniqueId(Structure):
    """zccUniqueId: 128 opaque bytes, passed by value."""

    _fields_ = [("internal", c_char * UNIQUE_ID_BYTES)]

    def to_bytes(self):
        return ctypes.string_at(ctypes.addressof(self), UNIQUE_ID_BYTES)

    @classmethod
    def from_bytes(cls, data):
        data = bytes(data)
        if len(data) != UNIQUE_ID_BYTES:
            raise ValueError("zcc: a unique id is %d bytes, got %d"
                             % (UNIQUE_ID_BYTES, len(data)))
        uid = cls()
        ctypes.memmove(ctypes.addressof(uid), data, UNIQUE_ID_BYTES)
        return uid


class Config(Structure):
    """zccConfig_t. Construct with ``Config.new()`` (ZCC_CONFIG_INITIALIZER)."""

    _fields_ = [
        ("size", c_size_t),
        ("magic", c_uint),
        ("version", c_uint),
        ("blocking", c_int),
        ("deviceType", c_int),
        ("timeoutMs", c_int),
        ("commName", c_char_p),
    ]

    @classmethod
    def new(cls):
        cfg = cls()
        cfg.size = ctypes.sizeof(cls)
        cfg.magic = CONFIG_MAGIC
        cfg.version = VERSION_CODE
        cfg.blocking = CONFIG_UNDEF_INT
        cfg.deviceType = CONFIG_UNDEF_INT
        cfg.timeoutMs = CONFIG_UNDEF_INT
        cfg.commName = None
        return cfg


class ZccError(RuntimeError):
    """A zcc call failed. ``result`` is the zccResult_t, ``name`` its enum
    name, ``function`` the C function, ``message`` zccGetLastError()."""

    def __init__(self, result, function, message):
        self.result = int(result)
        self.name = RESULT_NAMES.get(self.result, "zccResult(%d)" % self.result)
        self.function = function
        self.message = message
        text = "%s failed: %s (%s)" % (function, _error_string(self.result), self.name)
        if message:
            text += ": " + message
        super().__init__(text)


def library_search_path():
    """The candidate paths, in the order they are tried."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    env = os.environ.get("ZCC_LIBRARY")
    if env:
        out.append(env)
    out.append(os.path.join(here, "libzcc.so"))
    # python/zcc/_lib.py -> <repo>/build/src/libzcc.so
    repo = os.path.dirname(os.path.dirname(here))
    out.append(os.path.join(repo, "build", "src", "libzcc.so"))
    out.append("libzcc.so")  # the system loader
    out.append("libzcc.so.0")
    return out


def _load():
    errors = []
    env = os.environ.get("ZCC_LIBRARY")
    for path in library_search_path():
        if os.sep in path and not os.path.exists(path):
            if path == env:
                # An explicit choice that does not exist is an error, not a
                # reason to fall back silently to another copy.
                raise OSError("zcc: ZCC_LIBRARY=%s does not exist" % env)
            errors.append("%s: not found" % path)
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            if path == env:
                raise OSError("zcc: cannot load ZCC_LIBRARY=%s: %s" % (env, e))
            errors.append("%s: %s" % (path, e))
    raise OSError("zcc: cannot find libzcc.so; build it (cmake --build build) or set "
                  "ZCC_LIBRARY=/path/to/libzcc.so. Tried:\n  " + "\n  ".join(errors))


LIB, LIB_PATH = _load()

_comm_t = c_void_p
_stream_t = c_void_p
_res = c_int

_SIGNATURES = {
    "zccGetVersion": [POINTER(c_int)],
    "zccGetUniqueId": [POINTER(UniqueId)],
    "zccCommInitRank": [POINTER(_comm_t), c_int, UniqueId, c_int],
    "zccCommInitRankConfig": [POINTER(_comm_t), c_int, UniqueId, c_int, POINTER(Config)],
    "zccCommInitAll": [POINTER(_comm_t), c_int, POINTER(c_int)],
    "zccCommInitFromEnv": [POINTER(_comm_t), POINTER(Config)],
    "zccCommSplit": [_comm_t, c_int, c_int, POINTER(_comm_t), POINTER(Config)],
    "zccCommFinalize": [_comm_t],
    "zccCommDestroy": [_comm_t],
    "zccCommAbort": [_comm_t],
    "zccCommGetAsyncError": [_comm_t, POINTER(c_int)],
    # comm, path (None: ZCC_FLIGHT_RECORDER_FILE)
    "zccCommDump": [_comm_t, c_char_p],
    # kind ("step", "compute"), name, begin (1) or end (0)
    "zccTraceMark": [c_char_p, c_char_p, c_int],
    "zccGetParam": [c_int, POINTER(c_char_p), POINTER(c_char_p), POINTER(c_char_p),
                    POINTER(c_char_p)],
    "zccCommCount": [_comm_t, POINTER(c_int)],
    "zccCommCuDevice": [_comm_t, POINTER(c_int)],
    "zccCommUserRank": [_comm_t, POINTER(c_int)],
    "zccCommRegister": [_comm_t, c_void_p, c_size_t, POINTER(c_void_p)],
    "zccCommDeregister": [_comm_t, c_void_p],
    "zccMemAlloc": [POINTER(c_void_p), c_size_t],
    "zccMemFree": [c_void_p],
    "zccMemHostAlloc": [POINTER(c_void_p), c_size_t],
    "zccMemHostFree": [c_void_p],
    # sendbuff, recvbuff, count, datatype, op, comm, stream
    "zccAllReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, _comm_t, _stream_t],
    # sendbuff, recvbuff, count, datatype, root, comm, stream
    "zccBroadcast": [c_void_p, c_void_p, c_size_t, c_int, c_int, _comm_t, _stream_t],
    # sendbuff, recvbuff, count, datatype, op, root, comm, stream
    "zccReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, _comm_t, _stream_t],
    "zccAllGather": [c_void_p, c_void_p, c_size_t, c_int, _comm_t, _stream_t],
    "zccReduceScatter": [c_void_p, c_void_p, c_size_t, c_int, c_int, _comm_t, _stream_t],
    "zccAlltoAll": [c_void_p, c_void_p, c_size_t, c_int, _comm_t, _stream_t],
    # buff, count, datatype, peer, comm, stream
    "zccSend": [c_void_p, c_size_t, c_int, c_int, _comm_t, _stream_t],
    "zccRecv": [c_void_p, c_size_t, c_int, c_int, _comm_t, _stream_t],
    # buff, count, datatype, &peer (set to the sender), comm, stream
    "zccRecvAny": [c_void_p, c_size_t, c_int, POINTER(c_int), _comm_t, _stream_t],
    "zccGroupStart": [],
    "zccGroupEnd": [],
}

for _name, _args in _SIGNATURES.items():
    _fn = getattr(LIB, _name)  # AttributeError names a symbol the library lacks
    _fn.argtypes = _args
    _fn.restype = _res
    globals()[_name] = _fn

LIB.zccGetErrorString.argtypes = [c_int]
LIB.zccGetErrorString.restype = c_char_p
LIB.zccGetLastError.argtypes = [_comm_t]
LIB.zccGetLastError.restype = c_char_p
zccGetErrorString = LIB.zccGetErrorString
zccGetLastError = LIB.zccGetLastError
__all__ += list(_SIGNATURES) + ["zccGetErrorString", "zccGetLastError"]


def _error_string(result):
    s = zccGetErrorString(result)
    return s.decode("utf-8", "replace") if s else "unknown result %d" % result


def last_error(comm=None):
    """zccGetLastError(comm) as text ("" if none)."""
    s = zccGetLastError(comm)
    return s.decode("utf-8", "replace") if s else ""


def error(result, function, comm=None):
    """The ZccError for a failed call; read in the thread that made it."""
    return ZccError(result, function, last_error(comm))


def check(result, function, comm=None):
    """Raise ZccError unless result is zccSuccess."""
    if result:
        raise error(result, function, comm)


def _version():
    v = c_int()
    check(LIB.zccGetVersion(ctypes.byref(v)), "zccGetVersion")
    return v.value


VERSION_CODE = _version()
