"""zcc.Communicator without torch.distributed, and the DDP hook."""
import pytest
import torch

from cases import DTYPES, make, reference

NUMEL = 13


@pytest.mark.parametrize("dtype", DTYPES)
def test_comm_matrix(pool, dtype):
    n = pool.size
    res = pool.run("comm_matrix", dtype, NUMEL)
    ins = [make(r, NUMEL, dtype) for r in range(n)]
    big = [make(r, NUMEL * n, dtype) for r in range(n)]
    for r in range(n):
        got = res[r]
        for op in ("sum", "prod", "max", "min", "avg"):
            want = reference(ins, op, dtype)
            assert torch.equal(got["all_reduce_" + op], want), (r, op)
            assert torch.equal(got["all_reduce_out_" + op], want), (r, op)
            if r == n - 1:
                assert torch.equal(got["reduce_" + op], want), (r, op)
            blocks = [b[r * NUMEL:(r + 1) * NUMEL] for b in big]
            assert torch.equal(got["reduce_scatter_" + op], reference(blocks, op, dtype)), op
        assert torch.equal(got["broadcast"], make(1, NUMEL, dtype))
        cat = torch.cat(ins)
        assert torch.equal(got["all_gather"], cat)
        assert torch.equal(got["all_gather_inplace"], cat)
        a2a = torch.cat([b[r * NUMEL:(r + 1) * NUMEL] for b in big])
        assert torch.equal(got["all_to_all"], a2a)
        assert torch.equal(got["sendrecv"], ins[(r - 1) % n])


def test_split(pool):
    n = pool.size
    res = pool.run("comm_split")
    for r in range(n):
        colour = [q for q in range(n) if q % 2 == r % 2]
        sub_rank, sub_size, total, none_for_rank0 = res[r]
        assert sub_size == len(colour)
        # key = -rank: the highest old rank comes first
        assert sub_rank == sorted(colour, reverse=True).index(r)
        assert total == sum(colour)
        assert none_for_rank0 == (r == 0)


def test_info(pool2):
    for r, info in enumerate(pool2.run("comm_info")):
        assert (info["rank"], info["size"], info["device"]) == (r, 2, -1)
        assert info["repr"] == "<zcc.Communicator rank %d of 2 on host>" % r
        assert info["async"] == 0
        assert len(info["version"]) == 3
        assert "ZCC_DEBUG" in info["params"] and "ZCC_TIMEOUT" in info["params"]


def test_register(pool2):
    for t in pool2.run("comm_register"):
        assert torch.equal(t, torch.full((16,), 2.0))


def test_host_tensor_allreduce_in_place(pool):
    """zcc.host_tensor buffers on every rank: a 4 MiB + 4 B allreduce is
    exact through the Communicator and the torch backend, and this process
    maps its peers' regions afterwards (the direct path ran)."""
    import cases
    numel = (4 << 20) // 4 + 1
    res = pool.run("hostmem_all_reduce", numel)
    n = pool.size
    want = {k: cases.reference([cases.make(r, numel, "float32", salt=s) for r in range(n)],
                               "sum", "float32")
            for k, s in (("out", 0), ("inplace", 1), ("backend", 2))}
    for rank, r in enumerate(res):
        for k in want:
            assert torch.equal(r[k], want[k]), (rank, k)
        before, own, after = r["maps"]
        assert own == before + 3, r["maps"]
        # then the backend's tensor, and of each peer: the source and the
        # output, the in-place tensor, the backend's tensor
        assert after == own + 1 + 4 * (n - 1), r["maps"]


def test_registered_tensor_allreduce_in_place(pool):
    """Ordinary CPU tensors registered on every rank: a 4 MiB + 4 B
    allreduce is exact, the registration kept the values, and this process
    maps its peers' registered ranges afterwards (the direct path ran); the
    deregistration leaves none of its own mapped."""
    import cases
    numel = (4 << 20) // 4 + 1
    res = pool.run("registered_all_reduce", numel)
    n = pool.size
    want = {k: cases.reference([cases.make(r, numel, "float32", salt=s) for r in range(n)],
                               "sum", "float32")
            for k, s in (("out", 0), ("inplace", 1))}
    for rank, r in enumerate(res):
        for k in want:
            assert torch.equal(r[k], want[k]), (rank, k)
        assert r["kept"], rank
        before, own, after, released = r["maps"]
        # each of the three: its whole pages at the tensor's addresses and
        # the memfd's own view of it
        assert own == before + 6, r["maps"]
        # of each peer: the source and the output, the in-place tensor
        assert after == own + 3 * (n - 1), r["maps"]
        # peers' mappings stay cached until the communicator goes
        assert released == after - 6, r["maps"]


def test_host_tensor_bad_shape():
    import zcc
    with pytest.raises(ValueError):
        zcc.host_tensor((2, -1))


def test_hook_averages(pool):
    n = pool.size
    res = pool.run("hook_allreduce", 1000)
    want = torch.stack([make(r, 1000, "float32").double() for r in range(n)]).mean(0)
    for r in range(n):
        assert torch.equal(res[r], want.float())


def test_single_rank_in_process():
    import zcc
    uid = zcc.get_unique_id()
    with zcc.Communicator.from_unique_id(uid.to_bytes(), 0, 1, device="host") as c:
        t = torch.arange(6, dtype=torch.float64)
        assert c.all_reduce(t, "max") is t
        c.barrier()
        assert c.split(0).size == 1
    assert c.handle is None
    with pytest.raises(zcc.ZccError, match="destroyed"):
        c.all_reduce(t)
    with pytest.raises(ValueError, match="unique id is 128 bytes"):
        zcc.Communicator.from_unique_id(b"short", 0, 1)


def test_from_env_without_launcher(monkeypatch):
    import zcc
    for k in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
              "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(zcc.ZccError, match="no launcher environment"):
        zcc.Communicator.from_env(device="host")


def test_from_env_torchrun_style(monkeypatch):
    import zcc
    import workers
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("ZCC_COMM_ID", "127.0.0.1:%d" % workers.free_port())
    with zcc.Communicator.from_env(device="host") as c:
        assert (c.rank, c.size) == (0, 1)
        assert c.all_reduce(torch.ones(3)).tolist() == [1, 1, 1]


def test_mpi_offered_only_with_mpi4py():
    import importlib.util
    import zcc
    have = importlib.util.find_spec("mpi4py") is not None
    assert zcc.HAVE_MPI == have
    assert hasattr(zcc.Communicator, "from_mpi") == have


def test_recv_any(pool):
    got = pool.run("comm_recv_any")[0]
    assert sorted(src for src, _ in got) == list(range(1, pool.size)), got
    for src, t in got:
        assert t.tolist() == [src] * 9, (src, t)
