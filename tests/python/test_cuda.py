"""CUDA tensors: zcc.Communicator and the "zcc" torch.distributed backend on
the GPU, 2 ranks (processes).

With 2 GPUs each rank has its own (cuda:0, cuda:1) and results are also
compared with torch's NCCL on the same inputs. With one GPU both ranks share
cuda:0 (each takes LOCAL_RANK, else its rank, modulo the GPUs there are):
NCCL refuses two ranks on one GPU, so there the reference is the exact CPU
one alone (cases.reference over every rank's cases.make input; the inputs
are small values whose sums, products and averages are exact in every
dtype, so every comparison is bitwise).

Every test runs twice: on the transports zcc picks ("default": p2p, CUDA IPC
between the processes) and with ZCC_P2P_DISABLE=1 ("shm": the GPU
communicators connect through windows in pinned shared memory mapped into
the GPU; the test reads zcc's INIT log to see that they did).

Skipped, with the reason, where torch sees no GPU or this zcc cannot create
GPU communicators (a build without CUDA). scripts/gpu_run.sh python1 (one
GPU) and python (two) run it."""
import os
import shutil
import tempfile

import pytest
import torch

from cases import make, reference, OPS, DTYPES

# The backend's tests: torch's usual dtypes. The Communicator's: every dtype
# zcc reduces that this torch has (uint32, uint64, float8 on torch 2.x too).
GPU_DTYPES = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
COMM_DTYPES = DTYPES
BACKEND_CASES = [(d, 1025) for d in GPU_DTYPES] + \
    [(d, 262147) for d in ("int8", "float32", "bfloat16")]  # above 64 KiB a rank
NRANKS = 2


def _why_not():
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible to torch"
    return None


_LOG_DIR = tempfile.mkdtemp(prefix="zcc-test-cuda-")
VARIANTS = {
    "default": {},
    # INIT lines name each connection's transport: the test checks them
    "shm": {"ZCC_P2P_DISABLE": "1", "ZCC_DEBUG": "INFO", "ZCC_DEBUG_SUBSYS": "INIT",
            "ZCC_DEBUG_FILE": os.path.join(_LOG_DIR, "shm.%p.log")},
}


class Gpu:
    def __init__(self, pool, variant, setup):
        self.pool = pool
        self.variant = variant
        self.setup = setup
        self.nccl = all(s["nccl"] for s in setup)  # a torch NCCL reference exists
        self.shared = len({s["device"] for s in setup}) < NRANKS

    def run(self, name, *args):
        return self.pool.run(name, *args)


@pytest.fixture(scope="module", params=sorted(VARIANTS), ids=lambda v: v)
def gpu(request):
    why = _why_not()
    if why:
        pytest.skip(why)
    import conftest
    env = VARIANTS[request.param]
    pool = conftest.get_pool(NRANKS, env=env or None)
    probes = pool.run("cuda_probe")
    for why, _ in probes:
        if why:
            pytest.skip(why)
    for r, (_, facts) in enumerate(probes):
        ngpu = facts["gpus"]
        assert facts["device"] == r % ngpu, facts
        assert facts["comm_device"] == facts["device"], facts
    setup = pool.run("cuda_setup")
    yield Gpu(pool, request.param, setup)
    if env:
        conftest.close_pool(NRANKS, env=env)


def _inputs(numel, dtype, salt=0):
    return [make(q, numel, dtype, salt) for q in range(NRANKS)]


def _blocks(t, n):
    k = t.numel() // n
    return [t[j * k:(j + 1) * k] for j in range(n)]


def _eq(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, \
        "%s: got %s %s, expected %s %s" % (what, got.dtype, tuple(got.shape), want.dtype,
                                          tuple(want.shape))
    if got.element_size() == 1 and got.is_floating_point():
        # float8: no CPU comparison kernels; compare the bits (NaN poison differs)
        got, want = got.view(torch.uint8), want.view(torch.uint8)
    if not torch.equal(got, want):
        bad = (got != want).nonzero()
        i = tuple(bad[0].tolist()) if len(bad) else ()
        raise AssertionError("%s: %d of %d elements differ; first at %s: got %s, expected %s"
                             % (what, len(bad), got.numel(), i, got[i].item(), want[i].item()))


def test_cuda_setup(gpu):
    """Where the ranks are, and (shm) that every GPU connection went
    through the shm transport."""
    if gpu.variant == "shm":
        for r, s in enumerate(gpu.setup):
            assert s["paths"], "rank %d: no INIT line names a GPU connection's transport" % r
            for line in s["paths"]:
                assert line.rstrip().endswith("via shm"), "rank %d: %s" % (r, line)
    if torch.cuda.device_count() == 1:
        assert gpu.shared and not gpu.nccl


@pytest.mark.parametrize("dtype", COMM_DTYPES)
def test_cuda_comm(gpu, dtype):
    """zcc.Communicator on CUDA tensors: every collective, every op."""
    numel, n = 1031, NRANKS
    res = gpu.run("cuda_comm_ops", dtype, numel)
    x = _inputs(numel, dtype)
    big1 = _inputs(n * numel, dtype, 1)
    big2 = _inputs(n * numel, dtype, 2)
    for r in range(n):
        got = res[r]
        for op in OPS:
            want = reference(x, op, dtype)
            _eq(got["all_reduce_" + op], want, "rank %d all_reduce %s" % (r, op))
            out, inp = got["all_reduce_out_" + op]
            _eq(out, want, "rank %d all_reduce(out=) %s" % (r, op))
            _eq(inp, x[r], "rank %d all_reduce(out=) %s: the input changed" % (r, op))
            if r == 1:
                _eq(got["reduce_" + op], want, "rank 1 (root) reduce %s" % op)
            _eq(got["reduce_scatter_" + op],
                reference([_blocks(b, n)[r] for b in big1], op, dtype),
                "rank %d reduce_scatter %s" % (r, op))
        _eq(got["broadcast"], x[1], "rank %d broadcast from 1" % r)
        _eq(got["broadcast_out"], x[0], "rank %d broadcast(out=) from 0" % r)
        _eq(got["all_gather"], torch.cat(x), "rank %d all_gather" % r)
        _eq(got["all_gather_inplace"], torch.cat(x), "rank %d all_gather in place" % r)
        _eq(got["all_to_all"], torch.cat([_blocks(b, n)[r] for b in big2]),
            "rank %d all_to_all" % r)
        _eq(got["sendrecv"], make((r - 1) % n, numel, dtype, 3), "rank %d send/recv" % r)


def test_cuda_pinned_cpu(gpu):
    """Pinned CPU tensors on a GPU communicator: zero copy, exact; pageable ones refused."""
    numel, n = 4099, NRANKS
    res = gpu.run("cuda_pinned_ops", numel)
    x = [make(r, numel, "float32") for r in range(n)]
    g1 = [make(r, numel, "float32", 1) for r in range(n)]
    x2 = [make(r, numel, "float32", 2) for r in range(n)]
    for r in range(n):
        _eq(res[r]["all_reduce_out"], reference(x, "sum", "float32"), "rank %d pinned all_reduce" % r)
        _eq(res[r]["all_gather"], torch.cat(g1), "rank %d pinned all_gather" % r)
        _eq(res[r]["all_reduce_inplace"], reference(x2, "sum", "float32"),
            "rank %d pinned all_reduce in place" % r)
        assert "pin_memory" in res[r]["pageable"], res[r]["pageable"]


@pytest.mark.parametrize("numel", [4099, 1 << 20])
def test_cuda_pinned_backend(gpu, numel):
    """The seed's example on the "zcc" backend: dist.all_reduce of a pinned
    CPU tensor runs on the GPU communicator, zero copy, and the tensor holds
    the result when the call returns (sync and async_op); all_gather too;
    a pageable CPU tensor still runs on the host communicator."""
    n = NRANKS
    res = gpu.run("dist_pinned_ops", numel)
    for r in range(n):
        for name, salt in (("all_reduce", 0), ("all_reduce_async", 1), ("pageable", 3)):
            _eq(res[r][name], reference([make(q, numel, "float32", salt) for q in range(n)],
                                        "sum", "float32"), "rank %d pinned %s" % (r, name))
        _eq(res[r]["all_gather_into_tensor"],
            torch.cat([make(q, numel, "float32", 2) for q in range(n)]),
            "rank %d pinned all_gather_into_tensor" % r)


@pytest.mark.parametrize("dtype,numel", BACKEND_CASES)
def test_cuda_backend(gpu, dtype, numel):
    """torch.distributed over "zcc" on CUDA tensors: every collective,
    send/recv, isend/irecv and batch_isend_irecv, against the exact CPU
    reference (and, with 2 GPUs, torch's NCCL on the same inputs)."""
    n = NRANKS
    res = gpu.run("cuda_dist_ops", dtype, numel)
    x = _inputs(numel, dtype)
    big1 = _inputs(n * numel, dtype, 1)
    big2 = _inputs(n * numel, dtype, 2)
    for r in range(n):
        want = {}
        for op in OPS:
            want["all_reduce_" + op] = reference(x, op, dtype)
            want["reduce_" + op] = reference(x, op, dtype) if r == 0 else None
            want["reduce_scatter_tensor_" + op] = reference([_blocks(b, n)[r] for b in big1],
                                                            op, dtype)
        for op in ("sum", "max"):
            want["reduce_scatter_" + op] = reference(
                [make(q, numel, dtype, 10 + r) for q in range(n)], op, dtype)
        want["broadcast"] = x[1]
        want["all_gather"] = list(x)
        want["all_gather_into_tensor"] = torch.cat(x)
        want["all_to_all"] = [make(q, numel, dtype, 20 + r) for q in range(n)]
        want["all_to_all_single"] = torch.cat([_blocks(b, n)[r] for b in big2])
        rows = []
        for q in range(n):  # rank q sends rank r (q + r) % 3 + 1 rows, after its rows to ranks < r
            src = make(q, 2 * sum((q + j) % 3 + 1 for j in range(n)), dtype, 4).reshape(-1, 2)
            start = sum((q + j) % 3 + 1 for j in range(r))
            rows.append(src[start:start + (q + r) % 3 + 1])
        want["all_to_all_uneven"] = torch.cat(rows)
        want["send_recv"] = make(1 - r, numel, dtype, 5)
        want["isend_irecv"] = make((r - 1) % n, numel, dtype, 6)
        want["batch_isend_irecv"] = make((r + 1) % n, numel, dtype, 7)
        got_all = res[r]["res"]
        assert sorted(got_all) == sorted(want), sorted(got_all)
        for name, w in want.items():
            got, nccl = got_all[name]
            if w is None:
                continue
            what = "rank %d %s (%s, %d elements)" % (r, name, dtype, numel)
            if isinstance(w, list):
                assert len(got) == len(w), what
                for j, (g, wj) in enumerate(zip(got, w)):
                    _eq(g, wj, "%s[%d]" % (what, j))
            else:
                _eq(got, w, what)
            int_avg = name.endswith("_avg") and not dtype.startswith(("float", "bfloat"))
            if gpu.nccl and nccl is not None and not int_avg:
                # (NCCL has no integer avg that truncates like zcc's)
                if isinstance(w, list):
                    for g, h in zip(got, nccl):
                        _eq(g, h, what + " vs NCCL")
                else:
                    _eq(got, nccl, what + " vs NCCL")


def test_cuda_barrier(gpu):
    """dist.barrier: the early rank waits for the late one (1 s late), and
    each leaves only once the GPU work it queued before has run."""
    res = gpu.run("cuda_barrier", 1.0)
    took0, idle0 = res[0]
    assert took0 > 0.8, "rank 0 left the barrier after %.3f s; rank 1 came 1 s late" % took0
    for r, (took, idle) in enumerate(res):
        assert idle, "rank %d left the barrier with its GPU work still running" % r


@pytest.mark.parametrize("dtype", ["int32", "float32", "bfloat16"])
def test_cuda_wait_semantics(gpu, dtype):
    """work.wait() and the future's wait() make the waiting stream wait for
    an operation issued on another stream (behind a GPU sleep)."""
    numel, n = 4099, NRANKS
    res = gpu.run("cuda_async", dtype, numel)
    x = _inputs(numel, dtype)
    for r in range(n):
        got = res[r]
        _eq(got["all_reduce_wait"], reference(x, "sum", dtype), "rank %d all_reduce wait()" % r)
        _eq(got["all_reduce_future"], reference(x, "sum", dtype),
            "rank %d all_reduce get_future().wait()" % r)
        _eq(got["all_gather_wait"], torch.cat(x), "rank %d all_gather_into_tensor wait()" % r)
        _eq(got["irecv_wait"], make((r - 1) % n, numel, dtype, 3), "rank %d irecv wait()" % r)
        assert got["completed_after_sync"], "rank %d: is_completed() after synchronize" % r
        assert got["p2p_completed_after_sync"], "rank %d: p2p is_completed()" % r


@pytest.mark.parametrize("dtype", ["int64", "float16", "float32"])
def test_cuda_graph(gpu, dtype):
    """One torch.cuda.graph capture of Communicator.all_reduce and the
    backend's all_reduce (max), broadcast, all_gather_into_tensor,
    reduce_scatter_tensor, all_to_all_single and batch_isend_irecv;
    20 replays, each on fresh inputs with poisoned outputs."""
    numel, n, replays = 2053, NRANKS, 20
    res = gpu.run("cuda_graph", dtype, numel, replays)
    names = [name for name, _ in res[0]["inputs"]]
    for k in range(1, replays + 1):
        inp = {}
        for j, (name, m) in enumerate(res[0]["inputs"]):
            inp[name] = [make(q, m, dtype, salt=100 * k + j) for q in range(n)]
        assert names == sorted(inp)
        for r in range(n):
            got = res[r]["replays"][k - 1]
            what = "rank %d replay %d" % (r, k)
            _eq(got["comm"], reference(inp["comm"], "sum", dtype),
                what + " Communicator.all_reduce")
            _eq(got["all_reduce"], reference(inp["all_reduce"], "max", dtype),
                what + " all_reduce max")
            _eq(got["broadcast"], inp["broadcast"][1], what + " broadcast")
            _eq(got["all_gather"], torch.cat(inp["all_gather"]), what + " all_gather_into_tensor")
            _eq(got["reduce_scatter"],
                reference([_blocks(b, n)[r] for b in inp["reduce_scatter"]], "sum", dtype),
                what + " reduce_scatter_tensor")
            _eq(got["all_to_all"], torch.cat([_blocks(b, n)[r] for b in inp["all_to_all"]]),
                what + " all_to_all_single")
            _eq(got["recv"], inp["send"][(r - 1) % n], what + " batch_isend_irecv")


def teardown_module(module):
    shutil.rmtree(_LOG_DIR, ignore_errors=True)


def test_cuda_errors(gpu):
    """A CPU tensor, a non-contiguous tensor or an output of another dtype
    on a GPU communicator: refused with an exception, and the communicator
    goes on working."""
    res = gpu.run("cuda_errors")
    for r, (errs, x) in enumerate(res):
        cpu, strided, dtype, dist_strided = errs
        assert cpu is not None and cpu[0] == "ValueError" and "cuda" in cpu[1], (r, cpu)
        assert strided is not None and "not contiguous" in strided[1], (r, strided)
        assert dtype is not None and dtype[0] == "TypeError", (r, dtype)
        assert dist_strided is not None, r
        _eq(x, torch.full((5,), float(sum(q + 1 for q in range(NRANKS)))), "rank %d sum" % r)
