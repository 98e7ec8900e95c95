#!/usr/bin/env python3
"""PyTorch's own "nccl" backend on zcc's libnccl.so.2 (GPU host).

    LD_PRELOAD=/path/zcc/lib/nccl/libnccl.so.2 python3 tests/nccl/torch_nccl.py
    ... --nprocs 2          two ranks (one GPU each, or sharing GPU 0 once
                            zcc allows several ranks per GPU: --share-gpu,
                            or ZCC_NCCL_TORCH_NPROCS=2 ZCC_NCCL_TORCH_SHARE=1)
    ... --dump out.pt       also save the allreduce outputs, for
    ... --compare a.pt b.pt comparing two runs (zcc's and NCCL's) bitwise

PyTorch's wheels find libnccl.so.2 through libtorch_cuda.so's DT_RPATH
(nvidia/nccl/lib), which LD_LIBRARY_PATH cannot override: LD_PRELOAD puts
zcc's library (SONAME libnccl.so.2) in first. --expect zcc (the default
when LD_PRELOAD names a libnccl) checks that ncclAllReduce, looked up as
libtorch_cuda.so looks it up, comes from the preloaded file in every rank;
--expect nccl that it does not.

Checks, on every rank: torch.cuda.nccl.version(), init_process_group("nccl",
device_id=...), all_reduce (every op, several dtypes, exact values),
broadcast, reduce, all_gather(_into_tensor), reduce_scatter_tensor,
all_to_all_single (even and uneven splits), gather, scatter, send/recv
(two ranks or more), batch_isend_irecv, barrier, a CUDA graph with
collectives captured and replayed, a few DDP steps, and pre-multiplied sums
(all_reduce with a host and a device scalar; reduce_scatter_tensor, as
FSDP2 calls it, with a host scalar). Exit 0 when every rank passed.
"""
import argparse
import ctypes
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def store_server():
    """The ranks' store, served by this process on a port the kernel picked
    and keeps: a port found free and let go can be taken before a rank
    listens on it."""
    return dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)


def nccl_provider(sym="ncclAllReduce"):
    """The file whose `sym` a global lookup finds: what libtorch_cuda.so binds to.

    torch's __init__ loads the wheel's libnccl.so.2 by path even when another
    is preloaded, so both are mapped; the preloaded one comes first in the
    global scope, and libtorch_cuda.so's references bind to it.
    """
    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]
    libc = ctypes.CDLL("libc.so.6")
    try:
        addr = ctypes.cast(getattr(ctypes.CDLL(None), sym), ctypes.c_void_p)
    except AttributeError:  # not in the global scope: the wheel's, loaded RTLD_LOCAL
        return None
    info = DlInfo()
    if not libc.dladdr(addr, ctypes.byref(info)):
        return None
    return os.path.realpath(info.dli_fname.decode())


class Checks:
    def __init__(self, rank):
        self.rank = rank
        self.failed = []
        self.passed = 0

    def eq(self, name, got, want):
        got = got.cpu() if torch.is_tensor(got) else got
        want = want.cpu() if torch.is_tensor(want) else want
        if torch.is_tensor(got):
            ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        else:
            ok = got == want
        if ok:
            self.passed += 1
        else:
            self.failed.append(name)
            print(f"rank {self.rank}: FAILED {name}: got {got!r}, expected {want!r}", flush=True)

    def run(self, name, fn):
        try:
            fn()
        except Exception:  # noqa: BLE001 - a check that raised is a failed check
            self.failed.append(name)
            print(f"rank {self.rank}: FAILED {name} (raised)\n{traceback.format_exc()}", flush=True)


def inp(rank, n, dtype, dev, salt=0):
    """Small integers: every sum and product below is exact in every dtype."""
    base = (torch.arange(n, dtype=torch.int64) % 5) + rank + 1 + salt
    return base.to(dtype).to(dev)


def worker(rank, args, port, results):
    ngpu = torch.cuda.device_count()
    dev = torch.device("cuda", 0 if args.share_gpu else rank % max(ngpu, 1))
    torch.cuda.set_device(dev)
    c = Checks(rank)
    ws = args.nprocs
    c.eq("torch.cuda.nccl.version()", torch.cuda.nccl.version(), (2, 28, 9))
    dist.init_process_group("nccl", store=dist.TCPStore("127.0.0.1", port, None, False),
                            rank=rank, world_size=ws, device_id=dev)
    lib = nccl_provider()
    pre = os.path.realpath(args.shim) if args.shim else None
    if args.expect == "zcc":
        c.eq("ncclAllReduce comes from zcc's libnccl.so.2", lib, pre)
    elif args.expect == "nccl":
        c.eq("ncclAllReduce does not come from zcc's libnccl.so.2", lib == pre and lib is not None,
             False)
    print(f"rank {rank}: GPU {dev}, ncclAllReduce from {lib}", flush=True)

    n = 1000
    ops = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
           "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}
    dumps = {}

    def all_reduce():
        for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                   torch.float64):
            for name, op in ops.items():
                if name == "avg" and not dt.is_floating_point:
                    continue
                t = inp(rank, n, dt, dev)
                dist.all_reduce(t, op=op)
                xs = [inp(r, n, torch.float64, "cpu") for r in range(ws)]
                w = {"sum": sum(xs), "product": torch.stack(xs).prod(0),
                     "min": torch.stack(xs).min(0).values, "max": torch.stack(xs).max(0).values,
                     "avg": sum(xs) / ws}[name]
                c.eq(f"all_reduce {name} {dt}", t, w.to(dt))
        # Random floats: the bitwise comparison between libraries (--dump).
        g = torch.Generator().manual_seed(1234 + rank)
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            t = torch.randn(4096, generator=g).to(dt).to(dev)
            dist.all_reduce(t)
            dumps[f"all_reduce randn {dt}"] = t.cpu()

    def rooted():
        root = ws - 1
        t = inp(rank, n, torch.float32, dev)
        dist.broadcast(t, src=root)
        c.eq("broadcast", t, inp(root, n, torch.float32, "cpu"))
        t = inp(rank, n, torch.float32, dev)
        dist.reduce(t, dst=0)
        if rank == 0:
            c.eq("reduce", t, sum(inp(r, n, torch.float32, "cpu") for r in range(ws)))
        t = inp(rank, n, torch.float32, dev)
        gl = [torch.empty_like(t) for _ in range(ws)] if rank == root else None
        dist.gather(t, gl, dst=root)
        if rank == root:
            for r in range(ws):
                c.eq(f"gather block {r}", gl[r], inp(r, n, torch.float32, "cpu"))
        out = torch.empty(n, device=dev)
        sl = [inp(r, n, torch.float32, dev, salt=10) for r in range(ws)] if rank == 0 else None
        dist.scatter(out, sl, src=0)
        c.eq("scatter", out, inp(rank, n, torch.float32, "cpu", salt=10))

    def gathers():
        t = inp(rank, n, torch.float32, dev)
        out = torch.empty(ws * n, device=dev)
        dist.all_gather_into_tensor(out, t)
        c.eq("all_gather_into_tensor", out, torch.cat([inp(r, n, torch.float32, "cpu")
                                                       for r in range(ws)]))
        gl = [torch.empty_like(t) for _ in range(ws)]
        dist.all_gather(gl, t)
        for r in range(ws):
            c.eq(f"all_gather block {r}", gl[r], inp(r, n, torch.float32, "cpu"))
        src = torch.cat([inp(rank, n, torch.float32, dev, salt=b) for b in range(ws)])
        rs = torch.empty(n, device=dev)
        dist.reduce_scatter_tensor(rs, src)
        c.eq("reduce_scatter_tensor", rs, sum(inp(r, n, torch.float32, "cpu", salt=rank)
                                              for r in range(ws)))

    def alltoall():
        src = torch.cat([torch.full((n,), float(rank * 100 + b)) for b in range(ws)]).to(dev)
        out = torch.empty_like(src)
        dist.all_to_all_single(out, src)
        c.eq("all_to_all_single", out, torch.cat([torch.full((n,), float(r * 100 + rank))
                                                  for r in range(ws)]))
        # Uneven: rank r sends r + j + 1 elements to rank j.
        ins = [rank + j + 1 for j in range(ws)]
        outs = [r + rank + 1 for r in range(ws)]
        src = torch.cat([torch.full((k,), float(rank * 100 + j)) for j, k in enumerate(ins)]).to(dev)
        out = torch.empty(sum(outs), device=dev)
        dist.all_to_all_single(out, src, output_split_sizes=outs, input_split_sizes=ins)
        c.eq("all_to_all_single uneven", out, torch.cat(
            [torch.full((k,), float(r * 100 + rank)) for r, k in enumerate(outs)]))

    def p2p():
        if ws < 2:
            return
        nxt, prv = (rank + 1) % ws, (rank - 1) % ws
        t = inp(rank, n, torch.float32, dev)
        r = torch.empty_like(t)
        if rank % 2 == 0:
            dist.send(t, nxt)
            dist.recv(r, prv)
        else:
            dist.recv(r, prv)
            dist.send(t, nxt)
        c.eq("send/recv", r, inp(prv, n, torch.float32, "cpu"))
        r2 = torch.empty_like(t)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, nxt),
                                       dist.P2POp(dist.irecv, r2, prv)])
        for q in reqs:
            q.wait()
        c.eq("batch_isend_irecv", r2, inp(prv, n, torch.float32, "cpu"))

    def graph():
        t = inp(rank, n, torch.float32, dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            dist.all_reduce(t)  # warm-up outside the capture, as the docs ask
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        x = torch.zeros(n, device=dev)
        with torch.cuda.graph(g):
            x.add_(1.0)
            dist.all_reduce(x)
        for k in range(3):
            x.fill_(float(rank))
            g.replay()
            torch.cuda.synchronize()
            want = torch.full((n,), float(sum(r + 1 for r in range(ws))))
            c.eq(f"graph replay {k}", x, want)

    def ddp():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 1)).to(dev)
        ddp_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
        opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(rank)
        for _ in range(5):
            x = torch.randn(8, 16, generator=g).to(dev)
            loss = ddp_model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        w = model[0].weight.detach().clone()
        gl = [torch.empty_like(w) for _ in range(ws)]
        dist.all_gather(gl, w)
        for r in range(ws):
            c.eq(f"DDP weights equal on rank {r}", gl[r], w)

    def premul():
        xs = [inp(r, n, torch.float32, "cpu") for r in range(ws)]
        t = inp(rank, n, torch.float32, dev)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))  # host-immediate scalar
        c.eq("all_reduce premul_sum 0.5", t, sum(xs) * 0.5)
        t = inp(rank, n, torch.float32, dev)
        f = torch.tensor([2.0], device=dev)  # a tensor: ncclScalarDevice, read by the kernel
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(f))
        c.eq("all_reduce premul_sum device scalar 2", t, sum(xs) * 2)
        dumps["all_reduce premul_sum"] = t.cpu()
        if ws == 1:
            # One rank: torch copies the input without calling the library
            # (NCCL 2.28.9 and zcc both gave the unscaled input, 2026-12-01).
            return
        src = torch.cat([inp(rank, n, torch.float32, dev, salt=b) for b in range(ws)])
        rs = torch.empty(n, device=dev)
        dist.reduce_scatter_tensor(rs, src, op=dist._make_nccl_premul_sum(0.5))
        torch.cuda.synchronize()
        c.eq("reduce_scatter premul_sum", rs, sum(inp(r, n, torch.float32, "cpu", salt=rank)
                                                  for r in range(ws)) * 0.5)
        dumps["reduce_scatter premul_sum"] = rs.cpu()

    for name, fn in [("all_reduce", all_reduce), ("rooted", rooted), ("gathers", gathers),
                     ("alltoall", alltoall), ("p2p", p2p), ("graph", graph), ("ddp", ddp)]:
        c.run(name, fn)
    dist.barrier()
    torch.cuda.synchronize()
    # Last: a refused call may leave the communicator in error on some backends.
    c.run("premul", premul)
    dist.destroy_process_group()
    results[rank] = (c.passed, c.failed, dumps)


def compare(a, b):
    da, db = torch.load(a), torch.load(b)
    bad = 0
    for k in sorted(set(da) | set(db)):
        if k not in da or k not in db:
            print(f"compare: {k} only in {'b' if k not in da else 'a'}")
            bad += 1
            continue
        for r, (x, y) in enumerate(zip(da[k], db[k])):
            same = (x.dtype == y.dtype and x.shape == y.shape and
                    torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)))
            print(f"compare: rank {r} {k}: {'bitwise equal' if same else 'DIFFERENT'}")
            bad += not same
    print(f"compare: {a} vs {b}: {'equal' if bad == 0 else f'{bad} different'}")
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nprocs", type=int, default=int(os.environ.get("ZCC_NCCL_TORCH_NPROCS", "1")))
    p.add_argument("--share-gpu", action="store_true",
                   default=os.environ.get("ZCC_NCCL_TORCH_SHARE", "0") == "1",
                   help="every rank on GPU 0 (needs zcc to allow several ranks per GPU)")
    p.add_argument("--expect", choices=["zcc", "nccl", "any"], default=None)
    p.add_argument("--dump", default=None, help="save the random-input allreduce outputs here")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"))
    args = p.parse_args()
    if args.compare:
        return compare(*args.compare)
    pre = [x for x in os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
           if "libnccl.so" in os.path.basename(x)]
    args.shim = pre[0] if pre else None
    if args.expect is None:
        args.expect = "zcc" if pre else "any"
    if not torch.cuda.is_available():
        print("torch_nccl: skipped: no CUDA GPU")
        return 77
    if not args.share_gpu and args.nprocs > torch.cuda.device_count():
        print(f"torch_nccl: {args.nprocs} ranks but {torch.cuda.device_count()} GPU(s); "
              "--share-gpu puts them all on GPU 0 (zcc must allow several ranks per GPU)")
        return 2
    print(f"torch {torch.__version__}, {args.nprocs} rank(s){' on GPU 0' if args.share_gpu else ''}, "
          f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '')}, expect {args.expect}", flush=True)
    results = mp.Manager().dict()
    server = store_server()
    mp.spawn(worker, args=(args, server.port, results), nprocs=args.nprocs, join=True)
    bad = 0
    for r in range(args.nprocs):
        passed, failed, _ = results.get(r, (0, ["did not finish"], {}))
        print(f"rank {r}: {passed} checks passed, {len(failed)} failed {failed if failed else ''}")
        bad += len(failed)
    if args.dump:
        keys = results[0][2].keys()
        torch.save({k: [results[r][2][k] for r in range(args.nprocs)] for k in keys}, args.dump)
        print(f"torch_nccl: allreduce outputs in {args.dump}")
    print(f"torch_nccl: {'ok' if bad == 0 else f'{bad} check(s) FAILED'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
