"""What the rank processes run (see workers.py). Each function takes the
rank's context and plain arguments, and returns plain values or tensors
that the test in the parent checks against torch's own reductions of the
same inputs (make() builds every rank's input in any process)."""
import os

import torch
import torch.distributed as dist

DTYPES = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
for _extra in ("uint32", "uint64", "float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _extra):
        DTYPES.append(_extra)
OPS = ["sum", "prod", "max", "min", "avg"]
TORCH_OPS = {"sum": "SUM", "prod": "PRODUCT", "max": "MAX", "min": "MIN", "avg": "AVG"}


def is_float(dtype_name):
    return dtype_name.startswith(("float", "bfloat"))


def make(rank, numel, dtype_name, salt=0):
    """Rank `rank`'s input: small values, exact in every dtype, so that sums,
    products and averages of up to 4 ranks are exact too."""
    g = torch.Generator().manual_seed(1000 * rank + 7 * salt + numel)
    if dtype_name.startswith("uint"):
        v = torch.randint(0, 4, (numel,), generator=g)
    else:
        v = torch.randint(-4, 5, (numel,), generator=g)
        if dtype_name.startswith("float8"):
            # -1.0 .. 1.0 in halves: every partial sum of 4 ranks (|s| <= 4)
            # is exact in fp8 too (e5m2 has steps of 1 above 4)
            v = v.clamp(-2, 2).to(torch.float64) / 2
        elif is_float(dtype_name):
            v = v.to(torch.float64) / 2  # -2.0 .. 2.0 in halves
        else:
            v = v.clamp(-2, 2)
    return v.to(getattr(torch, dtype_name))


def reference(inputs, op, dtype_name):
    """torch's reduction over ranks (stacked on dim 0), in float64 or int64
    where small dtypes lack CPU kernels, then cast back."""
    wide = torch.float64 if is_float(dtype_name) else torch.int64
    x = torch.stack([t.to(wide) for t in inputs])
    if op == "sum":
        r = x.sum(0)
    elif op == "prod":
        r = x.prod(0)
    elif op == "max":
        r = x.amax(0)
    elif op == "min":
        r = x.amin(0)
    elif op == "avg":
        if is_float(dtype_name):
            r = x.sum(0) / len(inputs)
        else:
            r = torch.div(x.sum(0), len(inputs), rounding_mode="trunc")
    else:
        raise ValueError(op)
    return r.to(getattr(torch, dtype_name))


def setup(rank, size, port):
    import zcc
    import zcc.torch  # noqa: F401  registers the backend
    dist.init_process_group("zcc", store=dist.TCPStore("127.0.0.1", port, None, False),
                            rank=rank, world_size=size)
    store = dist.distributed_c10d._get_default_store()
    comm = zcc.Communicator.from_store(store, rank, size, key="tests/comm", device="host")
    return {"rank": rank, "size": size, "comm": comm, "store": store}


def teardown(ctx):
    ctx["comm"].destroy()
    dist.destroy_process_group()


def _t(dtype_name):
    return getattr(torch, dtype_name)


def _op(name):
    return getattr(dist.ReduceOp, TORCH_OPS[name])


# ---- torch.distributed backend ---------------------------------------------

def ops_for(dtype_name):
    return OPS


def dist_all_reduce(ctx, dtype_name, numel):
    out = {}
    for op in ops_for(dtype_name):
        t = make(ctx["rank"], numel, dtype_name)
        work = dist.all_reduce(t, op=_op(op), async_op=True)
        work.wait()
        out[op] = t
    return out


def dist_reduce(ctx, dtype_name, numel, root):
    out = {}
    for op in ops_for(dtype_name):
        t = make(ctx["rank"], numel, dtype_name)
        dist.reduce(t, root, op=_op(op))
        out[op] = t
    return out


def dist_broadcast(ctx, dtype_name, numel, root):
    t = make(ctx["rank"], numel, dtype_name)
    dist.broadcast(t, root)
    return t


def dist_all_gather(ctx, dtype_name, numel):
    outs = [torch.full((numel,), 9, dtype=_t(dtype_name)) for _ in range(ctx["size"])]
    dist.all_gather(outs, make(ctx["rank"], numel, dtype_name))
    return outs


def dist_all_gather_into_tensor(ctx, dtype_name, numel):
    out = torch.empty(ctx["size"] * numel, dtype=_t(dtype_name))
    fn = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
    fn(out, make(ctx["rank"], numel, dtype_name))
    return out


def dist_reduce_scatter(ctx, dtype_name, numel):
    out = {}
    for op in ops_for(dtype_name):
        ins = [make(ctx["rank"], numel, dtype_name, salt=j) for j in range(ctx["size"])]
        o = torch.empty(numel, dtype=_t(dtype_name))
        dist.reduce_scatter(o, ins, op=_op(op))
        out[op] = o
    return out


def dist_reduce_scatter_tensor(ctx, dtype_name, numel):
    out = {}
    fn = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    for op in ops_for(dtype_name):
        inp = make(ctx["rank"], numel * ctx["size"], dtype_name)
        o = torch.empty(numel, dtype=_t(dtype_name))
        fn(o, inp, op=_op(op))
        out[op] = o
    return out


def dist_all_to_all(ctx, dtype_name, numel):
    n = ctx["size"]
    ins = [make(ctx["rank"], numel, dtype_name, salt=j) for j in range(n)]
    outs = [torch.empty(numel, dtype=_t(dtype_name)) for _ in range(n)]
    dist.all_to_all(outs, ins)
    return outs


def dist_all_to_all_single(ctx, dtype_name, rows, uneven):
    n, r = ctx["size"], ctx["rank"]
    if uneven:
        # rank r sends (r + j) % 3 rows to rank j: splits differ per pair
        in_splits = [(r + j) % 3 for j in range(n)]
        out_splits = [(j + r) % 3 for j in range(n)]
    else:
        in_splits = out_splits = None
    nin = sum(in_splits) if uneven else rows * n
    nout = sum(out_splits) if uneven else rows * n
    inp = make(r, nin * 2, dtype_name).reshape(nin, 2)
    out = torch.full((nout, 2), 7, dtype=_t(dtype_name))
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    return out


def dist_send_recv(ctx, dtype_name, numel):
    """A ring through isend/irecv (each would block the other one by one),
    then a blocking send/recv pair between ranks 0 and 1."""
    n, r = ctx["size"], ctx["rank"]
    send = make(r, numel, dtype_name)
    got = torch.empty(numel, dtype=_t(dtype_name))
    reqs = [dist.isend(send, (r + 1) % n), dist.irecv(got, (r - 1) % n)]
    for q in reqs:
        q.wait()
    got2 = torch.empty(numel, dtype=_t(dtype_name))
    ops = [dist.P2POp(dist.irecv, got2, (r + 1) % n), dist.P2POp(dist.isend, send, (r - 1) % n)]
    for q in dist.batch_isend_irecv(ops):
        q.wait()
    pair = None
    if r == 0:
        dist.send(send, 1)
    elif r == 1:
        pair = torch.empty(numel, dtype=_t(dtype_name))
        dist.recv(pair, 0)
    return {"ring": got, "ring_back": got2, "pair": pair}


def dist_gather_scatter(ctx, dtype_name, numel, root):
    n, r = ctx["size"], ctx["rank"]
    gl = [torch.empty(numel, dtype=_t(dtype_name)) for _ in range(n)] if r == root else None
    dist.gather(make(r, numel, dtype_name), gl, dst=root)
    sl = [make(r, numel, dtype_name, salt=j) for j in range(n)] if r == root else None
    so = torch.empty(numel, dtype=_t(dtype_name))
    dist.scatter(so, sl, src=root)
    return {"gather": gl, "scatter": so}


def dist_single_names(ctx, dtype_name, numel, root):
    """The group methods torch 2.15 and later call (all_gather_single,
    reduce_scatter_single, all_to_all_single, gather_single and the
    *_single_coalesced pair), called directly so that every torch runs them,
    and dist.gather_single where torch has it."""
    n, r = ctx["size"], ctx["rank"]
    pg = dist.distributed_c10d._get_default_group()
    res = {"backend_is_group": pg._get_backend(torch.device("cpu")) is pg}
    ag_opts = dist.AllgatherOptions() if hasattr(dist, "AllgatherOptions") else None

    out = torch.full((n * numel,), 9, dtype=_t(dtype_name))
    pg.all_gather_single(out, make(r, numel, dtype_name), ag_opts).wait()
    res["all_gather_single"] = out

    outs = [torch.full((n * numel,), 9, dtype=_t(dtype_name)) for _ in range(2)]
    ins = [make(r, numel, dtype_name, salt=k) for k in range(2)]
    pg.all_gather_single_coalesced(outs, ins, ag_opts).wait()
    res["all_gather_single_coalesced"] = outs

    rs_opts = dist.ReduceScatterOptions()
    rs_opts.reduceOp = dist.ReduceOp.SUM
    o = torch.full((numel,), 9, dtype=_t(dtype_name))
    pg.reduce_scatter_single(o, make(r, n * numel, dtype_name), rs_opts).wait()
    res["reduce_scatter_single"] = o

    outs = [torch.full((numel,), 9, dtype=_t(dtype_name)) for _ in range(2)]
    ins = [make(r, n * numel, dtype_name, salt=k) for k in range(2)]
    pg.reduce_scatter_single_coalesced(outs, ins, rs_opts).wait()
    res["reduce_scatter_single_coalesced"] = outs

    inp = make(r, n * numel, dtype_name)
    o = torch.full((n * numel,), 9, dtype=_t(dtype_name))
    pg.all_to_all_single(o, inp, [], [], dist.AllToAllOptions()).wait()
    res["all_to_all_single"] = o

    g_opts = dist.GatherOptions()
    g_opts.rootRank = root
    o = torch.full((n * numel,), 9, dtype=_t(dtype_name)) if r == root \
        else torch.empty(0, dtype=_t(dtype_name))
    pg.gather_single(o, make(r, numel, dtype_name), g_opts).wait()
    res["gather_single"] = o if r == root else None

    if hasattr(dist, "gather_single"):  # torch 2.15 and later
        o = torch.full((n * numel,), 9, dtype=_t(dtype_name)) if r == root else None
        dist.gather_single(make(r, numel, dtype_name, salt=1), o, dst=root)
        res["dist.gather_single"] = o
    return res


def dist_barrier(ctx):
    import time
    # rank 0 arrives late: nobody may leave before it arrives
    if ctx["rank"] == 0:
        time.sleep(0.3)
    t0 = time.time()
    dist.barrier()
    return time.time() - t0


def dist_new_group(ctx):
    """A subgroup of the even ranks, with its own zcc communicators."""
    n, r = ctx["size"], ctx["rank"]
    evens = list(range(0, n, 2))
    g = dist.new_group(evens, backend="zcc")
    res = None
    if r in evens:
        t = torch.tensor([float(r)])
        dist.all_reduce(t, group=g)
        res = t.item()
    return res


def dist_backend_name(ctx):
    return dist.get_backend()


def dist_group_identity(ctx):
    """Group names and descriptions (set by torch 2.x, "" on 1.13), and
    destroy_process_group on a subgroup, which looks the group up by name."""
    n, r = ctx["size"], ctx["rank"]
    world = dist.distributed_c10d._get_default_group()
    res = {"world": (world.group_name, world.group_desc)}
    g = dist.new_group(list(range(n)), backend="zcc")
    res["sub"] = (g.group_name, g.group_desc)
    t = torch.tensor([float(r)])
    dist.all_reduce(t, group=g)
    res["sub_sum"] = t.item()
    dist.destroy_process_group(g)
    c10d = dist.distributed_c10d
    pg_map = c10d._world.pg_map if hasattr(c10d, "_world") else c10d._pg_map  # 2.x, 1.13
    res["sub_destroyed"] = g not in pg_map
    return res


def dist_functional(ctx, dtype_name, numel):
    """torch.distributed._functional_collectives on the world group and on
    a subgroup of the even ranks (None where torch has none: 1.13)."""
    try:
        import torch.distributed._functional_collectives as fc
    except ImportError:
        return None
    n, r = ctx["size"], ctx["rank"]
    evens = list(range(0, n, 2))
    sub = dist.new_group(evens, backend="zcc")
    res = {}
    for name, group, ranks in (("world", dist.group.WORLD, list(range(n))),
                               ("evens", sub, evens)):
        if r not in ranks:
            continue
        k = len(ranks)
        x = make(r, numel, dtype_name)
        big = make(r, k * numel, dtype_name)
        out = {}
        out["all_reduce"] = fc.wait_tensor(fc.all_reduce(x, "sum", group))
        out["all_gather_tensor"] = fc.wait_tensor(fc.all_gather_tensor(x, 0, group))
        out["reduce_scatter_tensor"] = fc.wait_tensor(
            fc.reduce_scatter_tensor(big, "sum", 0, group))
        out["all_to_all_single"] = fc.wait_tensor(
            fc.all_to_all_single(big, None, None, group))
        res[name] = out
    dist.destroy_process_group(sub)
    return res


def dist_all_gather_coalesced(ctx, dtype_name):
    """dist.all_gather_coalesced over inputs of 5, 3 and 0 elements and two
    shapes: outputs[j][i] is rank j's input i."""
    n, r = ctx["size"], ctx["rank"]
    ins = [make(r, 5, dtype_name), make(r, 6, dtype_name, salt=1).reshape(2, 3),
           torch.empty(0, dtype=_t(dtype_name))]
    outs = [[torch.full_like(x, 7) for x in ins] for _ in range(n)]
    dist.all_gather_coalesced(outs, ins)
    return outs


def dist_recv_any(ctx, numel):
    """Every rank in turn receives from any source, with recv and irecv,
    as torch's own test does; then rank 1 sends to rank 0 while the other
    ranks go straight into an allreduce with rank 0, whose receive from any
    source must still take rank 1's message."""
    n, r = ctx["size"], ctx["rank"]
    got = []
    for dst in range(n):
        if dst == r:
            for _ in range(n - 1):
                out = torch.full((numel,), -1.0)
                src = dist.recv(out)
                got.append((src, out))
                out = torch.full((numel,), -1.0)
                w = dist.irecv(out)
                w.wait()
                got.append((w._source_rank(), out))
        else:
            t = torch.full((numel,), float(r))
            dist.send(t, dst)
            dist.send(t, dst)
    race = None
    if r == 0:
        out = torch.full((numel,), -1.0)
        race = (dist.recv(out), out)
    elif r == 1:
        dist.send(torch.full((numel,), 1.0), 0)
    t = torch.tensor([float(r)])
    dist.all_reduce(t)
    return {"got": got, "race": race, "sum": t.item()}


def err_recv_any(ctx):
    """Receives from any source that are refused: an empty tensor, a dtype
    zcc lacks."""
    return [
        _error(lambda: dist.recv(torch.empty(0))),
        _error(lambda: dist.recv(torch.ones(4, dtype=torch.bool))),
    ]


# ---- errors --------------------------------------------------------------

def _error(fn):
    try:
        fn()
    except Exception as e:
        return (type(e).__name__, str(e))
    return None


def err_dtype(ctx):
    import zcc
    return [
        _error(lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool))),
        _error(lambda: ctx["comm"].broadcast(torch.ones(4, dtype=torch.complex64), 0)),
        _error(lambda: ctx["comm"].all_reduce(torch.ones(4, dtype=torch.int16))),
        _error(lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND)),
        _error(lambda: ctx["comm"].all_reduce(torch.ones(4), op="xor")),
        _error(lambda: ctx["comm"].all_reduce(torch.ones(4), out=torch.ones(4,
                                                                            dtype=torch.float64))),
        isinstance(zcc.dtype_of(torch.ones(1)), int),
    ]


def err_noncontiguous(ctx):
    m = torch.ones(4, 6)
    return [
        _error(lambda: dist.all_reduce(m.t())),
        _error(lambda: dist.broadcast(m[:, ::2], 0)),
        _error(lambda: ctx["comm"].all_gather(torch.empty(ctx["size"] * 12), m[::2])),
        _error(lambda: ctx["comm"].all_reduce(m.t())),
    ]


def err_shapes(ctx):
    n, c = ctx["size"], ctx["comm"]
    return [
        _error(lambda: dist.all_gather_into_tensor(torch.empty(n * 4 + 1), torch.ones(4))
               if hasattr(dist, "all_gather_into_tensor")
               else dist._all_gather_base(torch.empty(n * 4 + 1), torch.ones(4))),
        _error(lambda: dist.all_gather([torch.empty(4)] * (n - 1), torch.ones(4))),
        _error(lambda: dist.all_gather([torch.empty(3)] * n, torch.ones(4))),
        _error(lambda: c.reduce_scatter(torch.empty(4), torch.ones(n * 4 + 2))),
        _error(lambda: c.all_reduce(torch.ones(4), out=torch.empty(5))),
        _error(lambda: dist.all_to_all_single(torch.empty(n * 2), torch.ones(n * 2),
                                              [3] + [0] * (n - 1), [2] * n)),
        _error(lambda: c.all_to_all(torch.empty(n * 2 + 1), torch.ones(n * 2))),
    ]


def err_zcc(ctx):
    """Errors that the C library reports carry zccGetLastError()."""
    import zcc
    c = ctx["comm"]
    e1 = _error(lambda: c.broadcast(torch.ones(2), root=ctx["size"] + 3))
    try:
        c.reduce(torch.ones(2), root=-1)
    except zcc.ZccError as e:
        e2 = (e.result, e.name, e.function, e.message)
    sub = c.split(0)
    sub.destroy()
    e3 = _error(lambda: sub.all_reduce(torch.ones(2)))
    e4 = _error(lambda: c.send(torch.ones(2), ctx["rank"]))  # to self outside a group
    return [e1, e2, e3, e4]


def err_uninitialised(ctx):
    """In a fresh interpreter: torch.distributed with no process group."""
    import subprocess
    import sys
    code = ("import torch, torch.distributed as dist, zcc.torch\n"
            "try:\n    dist.all_reduce(torch.ones(2))\n"
            "except Exception as e:\n    print(type(e).__name__ + ': ' + str(e))\n")
    env = dict(os.environ)
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.path.join(os.path.dirname(os.path.dirname(here)), "python")
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, timeout=120)
    return p.stdout + p.stderr


# ---- the Communicator API --------------------------------------------------

def comm_matrix(ctx, dtype_name, numel):
    """Every collective of zcc.Communicator on one dtype."""
    c, n, r = ctx["comm"], ctx["size"], ctx["rank"]
    t = _t(dtype_name)
    res = {}
    for op in ops_for(dtype_name):
        x = make(r, numel, dtype_name)
        res["all_reduce_" + op] = c.all_reduce(x, op=op)
        x = make(r, numel, dtype_name)
        y = torch.empty_like(x)
        c.all_reduce(x, op=op, out=y)
        res["all_reduce_out_" + op] = y
        res["reduce_" + op] = c.reduce(make(r, numel, dtype_name), root=n - 1, op=op)
        rs = torch.empty(numel, dtype=t)
        res["reduce_scatter_" + op] = c.reduce_scatter(
            rs, make(r, numel * n, dtype_name), op=op)
    res["broadcast"] = c.broadcast(make(r, numel, dtype_name), root=1)
    ag = torch.empty(n * numel, dtype=t)
    res["all_gather"] = c.all_gather(ag, make(r, numel, dtype_name))
    # in place: the input is this rank's block of the output
    ag2 = torch.zeros(n * numel, dtype=t)
    ag2[r * numel:(r + 1) * numel] = make(r, numel, dtype_name)
    res["all_gather_inplace"] = c.all_gather(ag2, ag2[r * numel:(r + 1) * numel])
    a2a = torch.empty(n * numel, dtype=t)
    res["all_to_all"] = c.all_to_all(a2a, make(r, n * numel, dtype_name))
    peer = (r + 1) % n
    got = torch.empty(numel, dtype=t)
    mine = make(r, numel, dtype_name)  # alive until the group ends
    with __import__("zcc").group():
        c.send(mine, peer)
        c.recv(got, (r - 1) % n)
    res["sendrecv"] = got
    return res


_recv_any_round = [0]


def comm_recv_any(ctx):
    """Communicator.recv_any: every other rank sends to rank 0, which
    learns who sent each message. The others wait for rank 0 through the
    store before the barrier: no collective may reach a rank that waits
    for any source on the same communicator (zcc.h)."""
    n, r = ctx["size"], ctx["rank"]
    comm, store = ctx["comm"], ctx["store"]
    key = "tests/recv_any/%d" % _recv_any_round[0]
    _recv_any_round[0] += 1
    res = None
    if r == 0:
        res = []
        for _ in range(n - 1):
            t = torch.zeros(9, dtype=torch.int64)
            res.append((comm.recv_any(t), t))
        store.set(key, "done")
    else:
        comm.send(torch.full((9,), r, dtype=torch.int64), 0)
        store.get(key)
    comm.barrier()
    return res


def comm_split(ctx):
    c, r = ctx["comm"], ctx["rank"]
    sub = c.split(r % 2, key=-r)  # reversed order inside each colour
    t = torch.tensor([r], dtype=torch.int64)
    sub.all_reduce(t)
    out = (sub.rank, sub.size, t.item())
    none = c.split(None if r == 0 else 1)
    sub.destroy()
    if none is not None:
        none.destroy()
    with c.split(0) as s2:
        s2.barrier()
    return out + (none is None,)


def comm_info(ctx):
    import zcc
    c = ctx["comm"]
    return {"rank": c.rank, "size": c.size, "device": c.device, "repr": repr(c),
            "async": c.async_error(), "version": zcc.version(),
            "params": [p["name"] for p in zcc.params()]}


def comm_register(ctx):
    c = ctx["comm"]
    t = torch.ones(16)
    h = c.register(t)
    c.all_reduce(t)
    c.deregister(h)
    return t


def _hostmem_maps():
    with open("/proc/self/maps") as f:
        return sum("memfd:zcc-hostmem" in line for line in f)


def hostmem_all_reduce(ctx, numel):
    """Allreduce on zcc.host_tensor inputs and outputs, through the
    Communicator (out of place and in place) and through the torch backend:
    the results, and how many zccMemHostAlloc regions this process maps
    before and after (its own two and three, then its peers' too)."""
    import zcc
    c, rank = ctx["comm"], ctx["rank"]
    before = _hostmem_maps()
    src, dst, inplace = (zcc.host_tensor(numel) for _ in range(3))
    src.copy_(make(rank, numel, "float32"))
    dst.fill_(-7.0)  # poison
    inplace.copy_(make(rank, numel, "float32", salt=1))
    own = _hostmem_maps()
    c.all_reduce(src, out=dst)
    c.all_reduce(inplace)
    backend = zcc.host_tensor(numel)
    backend.copy_(make(rank, numel, "float32", salt=2))
    dist.all_reduce(backend)
    return {"out": dst.clone(), "inplace": inplace.clone(), "backend": backend.clone(),
            "maps": (before, own, _hostmem_maps())}


def _registered_maps():
    with open("/proc/self/maps") as f:
        return sum("memfd:zcc-registered" in line for line in f)


def registered_all_reduce(ctx, numel):
    """Allreduce on ordinary CPU tensors registered with comm.register (out
    of place and in place), then deregistered: the results, the values the
    source kept through its registration, and how many memfd mappings of
    registered ranges this process has before, while registered, after the
    calls and after deregistering."""
    c, rank = ctx["comm"], ctx["rank"]
    src = make(rank, numel, "float32")
    kept = src.clone()
    dst = torch.full((numel,), -7.0)  # poison
    inplace = make(rank, numel, "float32", salt=1)
    before = _registered_maps()
    hs = [c.register(t) for t in (src, dst, inplace)]
    same = torch.equal(src, kept)
    own = _registered_maps()
    c.all_reduce(src, out=dst)
    c.all_reduce(inplace)
    after = _registered_maps()
    for h in hs:
        c.deregister(h)
    return {"out": dst.clone(), "inplace": inplace.clone(), "kept": same,
            "maps": (before, own, after, _registered_maps())}


def hook_allreduce(ctx, numel):
    """allreduce_hook on a bucket-like object: the average over ranks."""
    import zcc.torch

    class Bucket:
        def __init__(self, t):
            self._t = t

        def buffer(self):
            return self._t

    r = ctx["rank"]
    buf = make(r, numel, "float32")
    fut = zcc.torch.allreduce_hook(ctx["comm"], Bucket(buf))
    return fut.wait()


# ---- CUDA tensors (test_cuda.py) -------------------------------------------
# Each rank takes GPU LOCAL_RANK (else its rank) modulo the GPUs there are:
# on a machine of one GPU both ranks of the pool share cuda:0. Outputs are
# poisoned (NaN, or 99 for integers: no result here is either) before every
# call, so an element a call fails to write never passes for a right one.

def _cuda_device(ctx):
    local = int(os.environ.get("LOCAL_RANK", ctx["rank"]))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def poison(shape, dtype_name, device):
    shape = (shape,) if isinstance(shape, int) else shape
    value = float("nan") if is_float(dtype_name) else 99
    # made on the CPU and copied: torch has few CUDA kernels for uint32 and float8
    return torch.full(shape, value, dtype=_t(dtype_name)).to(device)


def _cpu(x):
    if isinstance(x, dict):
        return {k: _cpu(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_cpu(v) for v in x)
    return x.cpu() if isinstance(x, torch.Tensor) else x


def cuda_probe(ctx):
    """(why not, None) where GPU communicators cannot run here: torch sees
    no GPU, or this zcc was built without CUDA; else (None, facts): the GPU
    this rank took, the GPUs there are. Any other failure to create one
    raises (the test fails)."""
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible to torch", None
    import zcc
    dev = _cuda_device(ctx)
    try:
        c = zcc.Communicator.from_store(ctx["store"], ctx["rank"], ctx["size"],
                                        key="tests/cuda_probe", device="cuda")
    except zcc.ZccError as e:
        if "has no CUDA" not in e.message:
            raise
        return "zcc cannot create GPU communicators: %s" % e.message, None
    facts = {"device": dev.index, "comm_device": c.device, "gpus": torch.cuda.device_count(),
             "torch": torch.__version__}
    c.destroy()
    return None, facts


def cuda_setup(ctx):
    """This rank's GPU communicator (zcc.Communicator), the "zcc" group's
    GPU communicator (made by a first CUDA collective), and torch's NCCL
    group where every rank has a GPU of its own (NCCL refuses two ranks on
    one GPU). Returns the zcc INIT lines naming each GPU connection's
    transport, when ZCC_DEBUG_FILE logs them."""
    import zcc
    dev = _cuda_device(ctx)
    if "gpu_comm" not in ctx:
        ctx["gpu_comm"] = zcc.Communicator.from_store(ctx["store"], ctx["rank"], ctx["size"],
                                                      key="tests/gpu", device="cuda")
        t = torch.zeros(1, device=dev)
        dist.all_reduce(t)  # every rank: the group's GPU communicator
        if torch.cuda.device_count() >= ctx["size"]:
            ctx["nccl"] = dist.new_group(backend="nccl")
        torch.cuda.synchronize()
    lines = []
    path = os.environ.get("ZCC_DEBUG_FILE")
    if path:
        path = path.replace("%p", str(os.getpid()))  # the pool's file names no %h
        with open(path) as f:
            lines = [ln.rstrip() for ln in f if "(GPU " in ln and " via " in ln]
    return {"device": dev.index, "nccl": "nccl" in ctx, "paths": lines}


def cuda_pinned_ops(ctx, numel):
    """zcc.Communicator (GPU) on pinned CPU tensors: the GPU reads and writes
    them in place; results read after the stream is synchronized."""
    import torch
    c, n, r = ctx["gpu_comm"], ctx["size"], ctx["rank"]
    dev = _cuda_device(ctx)
    res = {}
    x = make(r, numel, "float32").pin_memory()
    out = torch.full((numel,), float("nan")).pin_memory()
    c.all_reduce(x, out=out)
    big = torch.full((n * numel,), float("nan")).pin_memory()
    c.all_gather(big, make(r, numel, "float32", 1).pin_memory())
    inplace = make(r, numel, "float32", 2).pin_memory()
    c.all_reduce(inplace)
    torch.cuda.current_stream(dev).synchronize()
    res["all_reduce_out"] = out.clone()
    res["all_gather"] = big.clone()
    res["all_reduce_inplace"] = inplace.clone()
    try:
        c.all_reduce(make(r, numel, "float32"))  # pageable: refused
        res["pageable"] = "accepted"
    except ValueError as e:
        res["pageable"] = str(e)
    return res


def dist_pinned_ops(ctx, numel):
    """The seed's example on the "zcc" group: pinned CPU tensors go to the
    group's GPU communicator (the host communicator is made to refuse them
    meanwhile), and hold the result when the call returns, with no
    synchronize by the caller; a pageable CPU tensor still runs on the host
    communicator."""
    n, r = ctx["size"], ctx["rank"]
    pg = dist.distributed_c10d._get_default_group()
    be = pg._get_backend(torch.device("cpu")) if hasattr(pg, "_get_backend") else pg
    host = be._host

    def refuse(*args, **kwargs):
        raise AssertionError("the host communicator ran a collective on pinned tensors")
    res = {}
    host.all_reduce = host.all_gather = refuse  # instance attributes shadow the methods
    try:
        buf = make(r, numel, "float32").pin_memory()
        dist.all_reduce(buf)
        res["all_reduce"] = buf.clone()
        x = make(r, numel, "float32", 1).pin_memory()
        dist.all_reduce(x, async_op=True).wait()
        res["all_reduce_async"] = x.clone()
        out = torch.full((n * numel,), float("nan")).pin_memory()
        dist.all_gather_into_tensor(out, make(r, numel, "float32", 2).pin_memory())
        res["all_gather_into_tensor"] = out.clone()
    finally:
        del host.all_reduce, host.all_gather
    y = make(r, numel, "float32", 3)  # pageable: the host communicator
    dist.all_reduce(y)
    res["pageable"] = y
    return res


def cuda_comm_ops(ctx, dtype_name, numel):
    """Every collective of zcc.Communicator on CUDA tensors, on the current
    stream, in and out of place."""
    import zcc
    c, n, r = ctx["gpu_comm"], ctx["size"], ctx["rank"]
    dev = _cuda_device(ctx)

    def mk(rank, count, salt=0):
        return make(rank, count, dtype_name, salt).to(dev)
    res = {}
    for op in OPS:
        res["all_reduce_" + op] = c.all_reduce(mk(r, numel), op=op)
        out = poison(numel, dtype_name, dev)
        x = mk(r, numel)
        c.all_reduce(x, op=op, out=out)
        res["all_reduce_out_" + op] = (out, x)  # x must stay as it was
        out = poison(numel, dtype_name, dev) if r == 1 else mk(r, numel)
        res["reduce_" + op] = c.reduce(mk(r, numel), root=1, op=op, out=out)
        res["reduce_scatter_" + op] = c.reduce_scatter(poison(numel, dtype_name, dev),
                                                       mk(r, n * numel, 1), op=op)
    res["broadcast"] = c.broadcast(mk(r, numel), root=1)
    res["broadcast_out"] = c.broadcast(mk(r, numel), root=0, out=poison(numel, dtype_name, dev))
    res["all_gather"] = c.all_gather(poison(n * numel, dtype_name, dev), mk(r, numel))
    ag = poison(n * numel, dtype_name, dev)
    ag[r * numel:(r + 1) * numel] = mk(r, numel)
    res["all_gather_inplace"] = c.all_gather(ag, ag[r * numel:(r + 1) * numel])
    res["all_to_all"] = c.all_to_all(poison(n * numel, dtype_name, dev), mk(r, n * numel, 2))
    got = poison(numel, dtype_name, dev)
    mine = mk(r, numel, 3)  # alive until the group ends
    with zcc.group():
        c.send(mine, (r + 1) % n)
        c.recv(got, (r - 1) % n)
    res["sendrecv"] = got
    torch.cuda.synchronize()
    return _cpu(res)


def cuda_dist_ops(ctx, dtype_name, numel):
    """The "zcc" group (the default group) on CUDA tensors: every collective
    and send/recv. Where there is a torch NCCL group, each result comes with
    NCCL's on the same inputs: (zcc, nccl or None)."""
    n, r = ctx["size"], ctx["rank"]
    dev = _cuda_device(ctx)
    nccl = ctx.get("nccl")
    t = _t(dtype_name)
    res = {}

    def mk(rank, count, salt=0):
        return make(rank, count, dtype_name, salt).to(dev)

    def both(name, run):
        res[name] = (_cpu(run(None)), _cpu(run(nccl)) if nccl is not None else None)

    def all_reduce(op):
        def run(g):
            x = mk(r, numel)
            dist.all_reduce(x, op=_op(op), group=g)
            return x
        return run

    def reduce(op):
        def run(g):
            x = mk(r, numel)
            dist.reduce(x, 0, op=_op(op), group=g)
            return x if r == 0 else None
        return run

    def reduce_scatter_tensor(op):
        def run(g):
            out = poison(numel, dtype_name, dev)
            dist.reduce_scatter_tensor(out, mk(r, n * numel, 1), op=_op(op), group=g)
            return out
        return run

    def reduce_scatter_list(op):
        def run(g):
            out = poison(numel, dtype_name, dev)
            dist.reduce_scatter(out, [mk(r, numel, 10 + j) for j in range(n)], op=_op(op),
                                group=g)
            return out
        return run
    for op in OPS:
        both("all_reduce_" + op, all_reduce(op))
        both("reduce_" + op, reduce(op))
        both("reduce_scatter_tensor_" + op, reduce_scatter_tensor(op))
    for op in ("sum", "max"):
        both("reduce_scatter_" + op, reduce_scatter_list(op))

    def broadcast(g):
        x = mk(r, numel)
        dist.broadcast(x, 1, group=g)
        return x
    both("broadcast", broadcast)

    def all_gather(g):
        outs = [poison(numel, dtype_name, dev) for _ in range(n)]
        dist.all_gather(outs, mk(r, numel), group=g)
        return outs
    both("all_gather", all_gather)

    def all_gather_into_tensor(g):
        out = poison(n * numel, dtype_name, dev)
        dist.all_gather_into_tensor(out, mk(r, numel), group=g)
        return out
    both("all_gather_into_tensor", all_gather_into_tensor)

    def all_to_all(g):
        outs = [poison(numel, dtype_name, dev) for _ in range(n)]
        dist.all_to_all(outs, [mk(r, numel, 20 + j) for j in range(n)], group=g)
        return outs
    both("all_to_all", all_to_all)

    def all_to_all_single(g):
        out = poison(n * numel, dtype_name, dev)
        dist.all_to_all_single(out, mk(r, n * numel, 2), group=g)
        return out
    both("all_to_all_single", all_to_all_single)

    def all_to_all_uneven(g):
        # rank r sends (r + j) % 3 + 1 rows of 2 to rank j
        ins = [(r + j) % 3 + 1 for j in range(n)]
        outs = [(j + r) % 3 + 1 for j in range(n)]
        out = poison((sum(outs), 2), dtype_name, dev)
        dist.all_to_all_single(out, mk(r, 2 * sum(ins), 4).reshape(-1, 2), outs, ins, group=g)
        return out
    both("all_to_all_uneven", all_to_all_uneven)

    def send_recv(g):
        x = mk(r, numel, 5)
        got = poison(numel, dtype_name, dev)
        peer = 1 - r if r < 2 else None
        if r == 0:  # opposite orders on the two ranks: no wait cycle in either library
            dist.send(x, peer, group=g)
            dist.recv(got, peer, group=g)
        elif r == 1:
            dist.recv(got, peer, group=g)
            dist.send(x, peer, group=g)
        return got
    both("send_recv", send_recv)

    def isend_irecv(g):
        x = mk(r, numel, 6)
        got = poison(numel, dtype_name, dev)
        reqs = [dist.isend(x, (r + 1) % n, group=g), dist.irecv(got, (r - 1) % n, group=g)]
        for q in reqs:
            q.wait()
        return got
    both("isend_irecv", isend_irecv)

    def batch(g):
        x = mk(r, numel, 7)
        got = poison(numel, dtype_name, dev)
        ops = [dist.P2POp(dist.irecv, got, (r + 1) % n, group=g),
               dist.P2POp(dist.isend, x, (r - 1) % n, group=g)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        return got
    both("batch_isend_irecv", batch)
    torch.cuda.synchronize()
    return {"res": res, "dtype": str(t)}


def cuda_barrier(ctx, delay):
    """dist.barrier on the "zcc" group: the last rank to arrive comes
    ``delay`` seconds late, after enqueuing a GPU sleep; every rank must
    leave after it arrives, and (as with NCCL, whose barrier's wait blocks
    the host) once the GPU work it queued before has run. Returns (seconds
    this rank spent in the barrier, whether its stream was idle when it
    left)."""
    import time
    dev = _cuda_device(ctx)
    n, r = ctx["size"], ctx["rank"]
    stream = torch.cuda.current_stream(dev)
    torch.cuda.synchronize()
    if r == n - 1:
        time.sleep(delay)
        torch.cuda._sleep(100 * 1000 * 1000)  # tens of ms of GPU time, queued
    t0 = time.monotonic()
    dist.barrier()
    took = time.monotonic() - t0
    # query() does not wait: the sleep queued before the barrier has run by now
    return took, stream.query()


def cuda_async(ctx, dtype_name, numel):
    """Stream semantics as NCCL's. Each operation is issued with
    async_op=True on a side stream, behind a GPU sleep and a write of its
    input on that stream: it must read the input after the write (it is
    ordered on the stream current when it is issued, also a queued isend),
    and work.wait() or its future's wait() on the default stream must make
    that stream, not the host, wait for it, so a copy queued after the wait
    sees the result. Run without that ordering, the operation would read
    the poison and the copy would run during the sleep."""
    n, r = ctx["size"], ctx["rank"]
    dev = _cuda_device(ctx)
    main = torch.cuda.current_stream(dev)
    side = torch.cuda.Stream(dev)
    cycles = 100 * 1000 * 1000
    res = {}

    def on_side(inputs, fn):
        """inputs: (tensor, value) pairs written on the side stream."""
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)
            for t, v in inputs:
                t.copy_(v, non_blocking=True)
            return fn()

    x = poison(numel, dtype_name, dev)
    xv = make(r, numel, dtype_name).to(dev)
    work = on_side([(x, xv)], lambda: dist.all_reduce(x, async_op=True))
    work.wait()
    res["all_reduce_wait"] = x.clone()  # on the default stream, after the wait
    torch.cuda.synchronize()
    res["completed_after_sync"] = work.is_completed()

    y = poison(numel, dtype_name, dev)
    fut = on_side([(y, xv)], lambda: dist.all_reduce(y, async_op=True).get_future())
    res["all_reduce_future"] = fut.wait()[0].clone()

    out = poison(n * numel, dtype_name, dev)
    inp = poison(numel, dtype_name, dev)
    work = on_side([(inp, xv)], lambda: dist.all_gather_into_tensor(out, inp, async_op=True))
    work.wait()
    res["all_gather_wait"] = out.clone()

    got = poison(numel, dtype_name, dev)
    mine = poison(numel, dtype_name, dev)
    mv = make(r, numel, dtype_name, 3).to(dev)
    reqs = on_side([(mine, mv)], lambda: [dist.isend(mine, (r + 1) % n),
                                          dist.irecv(got, (r - 1) % n)])
    for q in reqs:  # issues the queued pair now, from the default stream
        q.wait()
    res["irecv_wait"] = got.clone()
    torch.cuda.synchronize()
    res["p2p_completed_after_sync"] = all(q.is_completed() for q in reqs)
    return _cpu(res)


def cuda_graph(ctx, dtype_name, numel, replays):
    """One torch.cuda.graph capture of zcc.Communicator.all_reduce and the
    "zcc" group's all_reduce, broadcast, all_gather_into_tensor,
    reduce_scatter_tensor, all_to_all_single and batch_isend_irecv; then
    ``replays`` replays, each after fresh inputs (salt k) were copied into
    the captured tensors and the outputs poisoned. Returns every replay's
    results."""
    n, r = ctx["size"], ctx["rank"]
    c = ctx["gpu_comm"]
    dev = _cuda_device(ctx)
    t = _t(dtype_name)
    ins = {"comm": numel, "all_reduce": numel, "broadcast": numel, "all_gather": numel,
           "reduce_scatter": n * numel, "all_to_all": n * numel, "send": numel}
    x = {k: torch.empty(m, dtype=t, device=dev) for k, m in ins.items()}
    outs = {"all_gather": n * numel, "reduce_scatter": numel, "all_to_all": n * numel,
            "recv": numel}
    y = {k: torch.empty(m, dtype=t, device=dev) for k, m in outs.items()}

    def load(k):
        for j, (name, m) in enumerate(sorted(ins.items())):
            x[name].copy_(make(r, m, dtype_name, salt=100 * k + j))
        for name in y:
            y[name].copy_(poison(y[name].shape, dtype_name, dev))

    def body():
        c.all_reduce(x["comm"])
        dist.all_reduce(x["all_reduce"], op=dist.ReduceOp.MAX)
        dist.broadcast(x["broadcast"], 1)
        dist.all_gather_into_tensor(y["all_gather"], x["all_gather"])
        dist.reduce_scatter_tensor(y["reduce_scatter"], x["reduce_scatter"])
        dist.all_to_all_single(y["all_to_all"], x["all_to_all"])
        ops = [dist.P2POp(dist.isend, x["send"], (r + 1) % n),
               dist.P2POp(dist.irecv, y["recv"], (r - 1) % n)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()

    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch advises
        load(0)
        body()
    torch.cuda.current_stream(dev).wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    res = []
    for k in range(1, replays + 1):
        load(k)
        g.replay()
        torch.cuda.synchronize()
        got = {name: v.clone() for name, v in x.items() if name not in ("all_gather", "send",
                                                                         "reduce_scatter",
                                                                         "all_to_all")}
        got.update({name: v.clone() for name, v in y.items()})
        res.append(_cpu(got))
    del g
    return {"replays": res, "inputs": sorted(ins.items())}


def cuda_errors(ctx):
    """What a GPU communicator refuses before it enqueues anything: a CPU
    tensor, a non-contiguous CUDA tensor, an output of another dtype; then
    an all-reduce still gives the right sum (nothing was left half done)."""
    c = ctx["gpu_comm"]
    dev = _cuda_device(ctx)
    m = torch.ones(4, 6, device=dev)
    errs = [
        _error(lambda: c.all_reduce(torch.ones(4))),
        _error(lambda: c.all_reduce(m.t())),
        _error(lambda: c.all_reduce(torch.ones(4, device=dev),
                                    out=torch.ones(4, dtype=torch.float64, device=dev))),
        _error(lambda: dist.all_reduce(m[:, ::2])),
    ]
    x = torch.full((5,), float(ctx["rank"] + 1), device=dev)
    c.all_reduce(x)
    return errs, x.cpu()
