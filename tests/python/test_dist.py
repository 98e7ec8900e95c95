"""The torch.distributed backend "zcc": every op x every dtype, 2 and 4
ranks, against torch's own reductions of the same inputs."""
import pytest
import torch
import torch.distributed as dist

from cases import DTYPES, make, reference

NUMEL = 37  # odd: no op may assume alignment


def assert_equal(got, want, what):
    assert got.dtype == want.dtype, "%s: dtype %s, expected %s" % (what, got.dtype, want.dtype)
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (what, got.shape, want.shape)
    if not torch.equal(got, want):
        raise AssertionError("%s:\n got  %s\n want %s" % (what, got.tolist(), want.tolist()))


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_reduce(pool, dtype):
    n = pool.size
    res = pool.run("dist_all_reduce", dtype, NUMEL)
    inputs = [make(r, NUMEL, dtype) for r in range(n)]
    for r in range(n):
        for op, got in res[r].items():
            assert_equal(got, reference(inputs, op, dtype), "rank %d %s %s" % (r, op, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce(pool, dtype):
    n = pool.size
    root = n - 1
    res = pool.run("dist_reduce", dtype, NUMEL, root)
    inputs = [make(r, NUMEL, dtype) for r in range(n)]
    for op, got in res[root].items():
        assert_equal(got, reference(inputs, op, dtype), "root %s %s" % (op, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast(pool, dtype):
    n = pool.size
    res = pool.run("dist_broadcast", dtype, NUMEL, 1)
    for r in range(n):
        assert_equal(res[r], make(1, NUMEL, dtype), "rank %d" % r)


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_gather(pool, dtype):
    n = pool.size
    res = pool.run("dist_all_gather", dtype, NUMEL)
    for r in range(n):
        for j in range(n):
            assert_equal(res[r][j], make(j, NUMEL, dtype), "rank %d block %d" % (r, j))


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_gather_into_tensor(pool, dtype):
    n = pool.size
    res = pool.run("dist_all_gather_into_tensor", dtype, NUMEL)
    want = torch.cat([make(j, NUMEL, dtype) for j in range(n)])
    for r in range(n):
        assert_equal(res[r], want, "rank %d" % r)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_scatter(pool, dtype):
    n = pool.size
    res = pool.run("dist_reduce_scatter", dtype, NUMEL)
    for r in range(n):
        blocks = [make(q, NUMEL, dtype, salt=r) for q in range(n)]
        for op, got in res[r].items():
            assert_equal(got, reference(blocks, op, dtype), "rank %d %s" % (r, op))


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_scatter_tensor(pool, dtype):
    n = pool.size
    res = pool.run("dist_reduce_scatter_tensor", dtype, NUMEL)
    inputs = [make(q, NUMEL * n, dtype) for q in range(n)]
    for r in range(n):
        blocks = [x[r * NUMEL:(r + 1) * NUMEL] for x in inputs]
        for op, got in res[r].items():
            assert_equal(got, reference(blocks, op, dtype), "rank %d %s" % (r, op))


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_to_all(pool, dtype):
    n = pool.size
    res = pool.run("dist_all_to_all", dtype, NUMEL)
    for r in range(n):
        for j in range(n):
            assert_equal(res[r][j], make(j, NUMEL, dtype, salt=r), "rank %d from %d" % (r, j))


@pytest.mark.parametrize("uneven", [False, True], ids=["equal", "uneven"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_to_all_single(pool, dtype, uneven):
    n, rows = pool.size, 3
    res = pool.run("dist_all_to_all_single", dtype, rows, uneven)
    for r in range(n):
        want = []
        for j in range(n):
            if uneven:
                splits = [(j + q) % 3 for q in range(n)]
            else:
                splits = [rows] * n
            src = make(j, sum(splits) * 2, dtype).reshape(-1, 2)
            start = sum(splits[:r])
            want.append(src[start:start + splits[r]])
        assert_equal(res[r], torch.cat(want), "rank %d" % r)


@pytest.mark.parametrize("dtype", DTYPES)
def test_send_recv(pool, dtype):
    n = pool.size
    res = pool.run("dist_send_recv", dtype, NUMEL)
    for r in range(n):
        assert_equal(res[r]["ring"], make((r - 1) % n, NUMEL, dtype), "ring rank %d" % r)
        assert_equal(res[r]["ring_back"], make((r + 1) % n, NUMEL, dtype), "back rank %d" % r)
    assert_equal(res[1]["pair"], make(0, NUMEL, dtype), "pair")


@pytest.mark.parametrize("dtype", ["int32", "bfloat16", "float64"])
def test_gather_scatter(pool, dtype):
    n = pool.size
    root = n - 1
    res = pool.run("dist_gather_scatter", dtype, NUMEL, root)
    for j in range(n):
        assert_equal(res[root]["gather"][j], make(j, NUMEL, dtype), "gather block %d" % j)
    for r in range(n):
        assert_equal(res[r]["scatter"], make(root, NUMEL, dtype, salt=r), "scatter rank %d" % r)


@pytest.mark.parametrize("dtype", ["int8", "float32", "bfloat16"])
def test_single_tensor_names(pool, dtype):
    """The method names torch 2.15 and later call on the group."""
    n = pool.size
    root = n - 1
    res = pool.run("dist_single_names", dtype, NUMEL, root)

    def gathered(salt=0, numel=NUMEL):
        return torch.cat([make(j, numel, dtype, salt=salt) for j in range(n)])

    for r in range(n):
        got = res[r]
        assert got["backend_is_group"], r
        assert_equal(got["all_gather_single"], gathered(), "all_gather_single rank %d" % r)
        for k in range(2):
            assert_equal(got["all_gather_single_coalesced"][k], gathered(salt=k),
                         "all_gather_single_coalesced[%d] rank %d" % (k, r))
        blocks = [make(j, n * NUMEL, dtype) for j in range(n)]
        want = reference([b[r * NUMEL:(r + 1) * NUMEL] for b in blocks], "sum", dtype)
        assert_equal(got["reduce_scatter_single"], want, "reduce_scatter_single rank %d" % r)
        for k in range(2):
            blocks = [make(j, n * NUMEL, dtype, salt=k) for j in range(n)]
            want = reference([b[r * NUMEL:(r + 1) * NUMEL] for b in blocks], "sum", dtype)
            assert_equal(got["reduce_scatter_single_coalesced"][k], want,
                         "reduce_scatter_single_coalesced[%d] rank %d" % (k, r))
        want = torch.cat([make(j, n * NUMEL, dtype)[r * NUMEL:(r + 1) * NUMEL]
                          for j in range(n)])
        assert_equal(got["all_to_all_single"], want, "all_to_all_single rank %d" % r)
    assert_equal(res[root]["gather_single"], gathered(), "gather_single")
    if "dist.gather_single" in res[root]:
        assert_equal(res[root]["dist.gather_single"], gathered(salt=1), "dist.gather_single")


def test_init_with_device_id():
    """init_process_group("zcc", device_id=...): torch 2.x's eager init."""
    import inspect
    import os
    import subprocess
    import sys
    import torch.distributed as dist
    if "device_id" not in inspect.signature(dist.init_process_group).parameters:
        pytest.skip("this torch (%s) has no init_process_group(device_id=)" % torch.__version__)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "init_device_id.py")
    p = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    if p.returncode == 0 and "refuses a CPU device" in out:
        pytest.skip("torch %s takes only accelerators as device_id" % torch.__version__)
    assert p.returncode == 0 and "device_id ok" in out, out


def test_barrier(pool):
    waited = pool.run("dist_barrier")
    # rank 0 arrived 0.3 s late: every other rank waited for it
    for r in range(1, pool.size):
        assert waited[r] > 0.2, "rank %d left the barrier after %.3fs" % (r, waited[r])


def test_new_group(pool):
    res = pool.run("dist_new_group")
    evens = list(range(0, pool.size, 2))
    for r in range(pool.size):
        assert res[r] == (float(sum(evens)) if r in evens else None)


def test_backend_name(pool2):
    assert pool2.run("dist_backend_name") == ["zcc", "zcc"]


def test_group_identity(pool):
    has_names = hasattr(dist.ProcessGroup, "_set_group_name")
    for r, res in enumerate(pool.run("dist_group_identity")):
        if has_names:  # torch 2.x names its groups
            assert res["world"][0] and res["world"][1] == "default_pg", res
            assert res["sub"][0] and res["sub"][0] != res["world"][0], res
        else:
            assert res["world"] == ("", "") and res["sub"] == ("", ""), res
        assert res["sub_sum"] == sum(range(pool.size)), res
        assert res["sub_destroyed"], res


@pytest.mark.parametrize("dtype", ["int32", "float32", "bfloat16"])
def test_functional_collectives(pool, dtype):
    n = pool.size
    res = pool.run("dist_functional", dtype, NUMEL)
    if res[0] is None:
        pytest.skip("torch %s has no torch.distributed._functional_collectives"
                    % torch.__version__)
    for name, ranks in (("world", list(range(n))), ("evens", list(range(0, n, 2)))):
        k = len(ranks)
        xs = [make(q, NUMEL, dtype) for q in ranks]
        bigs = [make(q, k * NUMEL, dtype) for q in ranks]
        for i, r in enumerate(ranks):
            got = res[r][name]
            what = "%s rank %d" % (name, r)
            assert_equal(got["all_reduce"], reference(xs, "sum", dtype), what + " all_reduce")
            assert_equal(got["all_gather_tensor"], torch.cat(xs), what + " all_gather_tensor")
            blk = [b[i * NUMEL:(i + 1) * NUMEL] for b in bigs]
            assert_equal(got["reduce_scatter_tensor"], reference(blk, "sum", dtype),
                         what + " reduce_scatter_tensor")
            assert_equal(got["all_to_all_single"], torch.cat(blk), what + " all_to_all_single")
        for r in range(n):
            if r not in ranks:
                assert name not in res[r]


@pytest.mark.parametrize("dtype", ["int8", "float32", "float64"])
def test_all_gather_coalesced(pool, dtype):
    n = pool.size
    res = pool.run("dist_all_gather_coalesced", dtype)
    for r in range(n):
        for j in range(n):
            want = [make(j, 5, dtype), make(j, 6, dtype, salt=1).reshape(2, 3),
                    torch.empty(0, dtype=getattr(torch, dtype))]
            for i, w in enumerate(want):
                assert_equal(res[r][j][i], w, "rank %d output[%d][%d]" % (r, j, i))


def test_recv_any_source(pool):
    n = pool.size
    res = pool.run("dist_recv_any", 10)
    for r in range(n):
        got = res[r]["got"]
        assert len(got) == 2 * (n - 1), got
        senders = sorted(src for src, _ in got)
        assert senders == sorted(2 * [q for q in range(n) if q != r]), senders
        for src, t in got:
            assert torch.equal(t, torch.full((10,), float(src))), (r, src, t)
        assert res[r]["sum"] == sum(range(n))
    src, t = res[0]["race"]
    assert src == 1 and torch.equal(t, torch.full((10,), 1.0)), (src, t)


def test_recv_any_source_refused(pool2):
    for empty, bad_dtype in pool2.run("err_recv_any"):
        assert empty is not None and "zccRecvAny" in empty[1] and "count is 0" in empty[1], empty
        assert bad_dtype is not None and bad_dtype[0] == "TypeError", bad_dtype
