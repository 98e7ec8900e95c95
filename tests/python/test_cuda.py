"""CUDA tensors: zcc against torch's NCCL on 2 GPUs, and CUDA graph capture of
Communicator.all_reduce. Skipped, with the reason, where there are not two
GPUs or this zcc cannot create GPU communicators. Run them on a GPU host
(scripts/test_python.sh there)."""
import pytest
import torch

from cases import make, reference

GPU_DTYPES = ["int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def _why_not():
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible to torch"
    if torch.cuda.device_count() < 2:
        return "needs 2 GPUs, torch sees %d" % torch.cuda.device_count()
    return None


@pytest.fixture(scope="module")
def gpu_pool():
    why = _why_not()
    if why:
        pytest.skip(why)
    import conftest
    pool = conftest.get_pool(2)
    why = pool.run("cuda_probe")[0]
    if why:
        pytest.skip(why)
    return pool


@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_cuda_all_reduce_vs_nccl(gpu_pool, dtype):
    res = gpu_pool.run("cuda_all_reduce", dtype, 1025)
    inputs = [make(r, 1025, dtype) for r in range(2)]
    for r in range(2):
        for op in ("sum", "prod", "max", "min", "avg"):
            got, nccl = res[r][op]
            assert torch.equal(got, reference(inputs, op, dtype)), (r, op)
            if op != "avg" or dtype.startswith(("float", "bfloat")):
                assert torch.equal(got, nccl), (r, op)
        # replaying the captured graph sums this rank's fresh input
        assert torch.equal(res[r]["graph"], reference(inputs, "sum", dtype)), r


@pytest.mark.parametrize("numel", [1025, 262147])  # LL, and the push kernel (above 64 KiB)
@pytest.mark.parametrize("dtype", ["int32", "float32", "bfloat16"])
def test_cuda_backend_vs_nccl(gpu_pool, dtype, numel):
    """torch.distributed with the "zcc" backend on CUDA tensors gives what
    torch's NCCL gives (2 ranks: every sum has one order, so bitwise)."""
    res = gpu_pool.run("cuda_dist_ops", dtype, numel)
    for r in range(2):
        for name, (got, nccl) in res[r].items():
            if name == "reduce" and r != 0:
                continue
            if name == "all_reduce_avg" and not dtype.startswith(("float", "bfloat")):
                continue  # NCCL has no integer avg that truncates like zcc's
            assert torch.equal(got, nccl), (r, name)
