"""zcc from Python: a ctypes shim over libzcc.

    import zcc
    comm = zcc.Communicator.from_env()       # torchrun, mpirun, srun
    comm.all_reduce(tensor)                  # CPU or CUDA torch tensors

``import zcc.torch`` registers the torch.distributed backend "zcc" and
provides the DDP communication hook ``zcc.torch.allreduce_hook``.
The library is found through ZCC_LIBRARY, this package's directory, the
source tree's build/src/, then the system loader (see zcc._lib).
"""
from ._lib import (ZccError, UniqueId, Config, LIB_PATH, VERSION_CODE,
                   RESULT_NAMES, library_search_path)
from ._comm import (Communicator, RedOp, DataType, DeviceType, HAVE_MPI,
                    get_unique_id, group, group_start, group_end, version, params,
                    mem_alloc, mem_free, host_tensor, dtype_of, supported_dtypes)

__version__ = "%d.%d.%d" % version()

__all__ = [
    "ZccError", "UniqueId", "Config", "LIB_PATH", "VERSION_CODE", "RESULT_NAMES",
    "library_search_path", "Communicator", "RedOp", "DataType", "DeviceType",
    "HAVE_MPI", "get_unique_id", "group", "group_start", "group_end", "version",
    "params", "mem_alloc", "mem_free", "host_tensor", "dtype_of", "supported_dtypes",
]
