#!/usr/bin/env python3
"""DTensor and FSDP2 over zcc, checked against gloo, on CPU.

In one set of processes, two programs run twice each, once on a device
mesh over the default group (backend "zcc") and once on a mesh over a gloo
group, from the same weights on the same generated data:
  tp    tensor parallel with DTensor: an MLP whose first Linear is split by
        columns and second by rows (parallelize_module), each rank feeding
        the same batch; plus distribute_tensor / redistribute / full_tensor
        checked against the local result;
  fsdp  FSDP2: fully_shard on every Linear and on the model, each rank its
        own batch (parameters all-gathered, gradients reduce-scattered).
The loss curves of zcc and gloo must agree to --rtol (default 1e-5
relative) at every step; the script exits 1 if they do not.

    python3 examples/dtensor_fsdp_train.py                 # 2 processes, 50 steps
    python3 examples/dtensor_fsdp_train.py --nprocs 4 --steps 100

Needs torch 2.4 or later (DeviceMesh.from_group, fully_shard); with an
older torch it says so and exits 0 without training. Run from a source
checkout it finds python/zcc and build/src/libzcc.so (or set ZCC_LIBRARY).
"""
import argparse
import gc
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nprocs", type=int, default=2)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=16, help="samples per rank per step")
    p.add_argument("--rtol", type=float, default=1e-5)
    p.add_argument("--every", type=int, default=10, help="print a curve point every N steps")
    return p.parse_args()


def missing_api():
    """What this torch lacks for the example, or None."""
    try:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor.parallel import parallelize_module  # noqa: F401
    except ImportError as e:
        return "no DTensor / device mesh (%s)" % e
    if not hasattr(DeviceMesh, "from_group"):
        return "no DeviceMesh.from_group"
    if fully_shard() is None:
        return "no FSDP2 fully_shard"
    return None


def fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard as fs  # torch 2.6 and later
        return fs
    except ImportError:
        pass
    try:
        from torch.distributed._composable.fsdp import fully_shard as fs  # 2.4, 2.5
        return fs
    except ImportError:
        return None


def dtensor_api():
    try:
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    except ImportError:  # torch before 2.5
        from torch.distributed._tensor import Replicate, Shard, distribute_tensor
    return Replicate, Shard, distribute_tensor


def make_data(n, dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, 1, generator=g)
    y = torch.sin(x @ w) + 0.1 * (x ** 2).sum(1, keepdim=True) / dim
    return x, y


def make_model(dim, hidden=32):
    torch.manual_seed(1234)  # every run and rank starts from the same weights
    return torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, 1))


def dtensor_checks(mesh, rank, world):
    """distribute_tensor / redistribute / full_tensor against local math;
    returns the largest error."""
    Replicate, Shard, distribute_tensor = dtensor_api()
    g = torch.Generator().manual_seed(7)
    a = torch.randn(4 * world, 6, generator=g)
    b = torch.randn(6, 2 * world, generator=g)
    ad = distribute_tensor(a, mesh, [Shard(0)])
    bd = distribute_tensor(b, mesh, [Replicate()])
    err = (ad.full_tensor() - a).abs().max().item()
    prod = (ad @ bd).redistribute(mesh, [Replicate()]).to_local()
    err = max(err, (prod - a @ b).abs().max().item())
    bs = distribute_tensor(b, mesh, [Shard(1)])
    err = max(err, ((distribute_tensor(a, mesh, [Replicate()]) @ bs).full_tensor()
                    - a @ b).abs().max().item())
    return err


def train_tp(args, rank, world, mesh):
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    dim = 8
    x, y = make_data(args.batch * 8, dim)
    model = parallelize_module(make_model(dim, hidden=8 * world), mesh,
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    nb = x.shape[0] // args.batch
    for step in range(args.steps):
        lo = (step % nb) * args.batch  # every rank the same batch
        loss = torch.nn.functional.mse_loss(model(x[lo:lo + args.batch]),
                                            y[lo:lo + args.batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses).float()


def train_fsdp(args, rank, world, mesh, ref_group):
    shard = fully_shard()
    dim = 8
    x, y = make_data(args.batch * world * 8, dim)
    model = make_model(dim)
    for m in model:
        if isinstance(m, torch.nn.Linear):
            shard(m, mesh=mesh)
    shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    nb = x.shape[0] // (args.batch * world)
    for step in range(args.steps):
        lo = ((step % nb) * world + rank) * args.batch
        loss = torch.nn.functional.mse_loss(model(x[lo:lo + args.batch]),
                                            y[lo:lo + args.batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    curve = torch.stack(losses).float()
    dist.all_reduce(curve, group=ref_group)  # the mean over ranks, step by step
    return curve / world


def worker(rank, world, args):
    import zcc
    import zcc.torch  # noqa: F401  registers the backend
    from torch.distributed.device_mesh import DeviceMesh
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", args.port, None, False)
    dist.init_process_group("zcc", store=store, rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    meshes = {"zcc": DeviceMesh.from_group(dist.group.WORLD, "cpu"),
              "gloo": DeviceMesh.from_group(gloo, "cpu")}
    errs = {n: dtensor_checks(m, rank, world) for n, m in meshes.items()}
    curves = {}
    for n, m in meshes.items():
        curves["tp", n] = train_tp(args, rank, world, m)
        curves["fsdp", n] = train_fsdp(args, rank, world, m, gloo)
    ok = all(e < 1e-5 for e in errs.values())
    if rank == 0:
        print("DTensor and FSDP2, %d ranks on cpu, %d steps, zcc %s, torch %s"
              % (world, args.steps, zcc.__version__, torch.__version__))
        for n, e in errs.items():
            print("dtensor checks over %s: max error %.3g" % (n, e))
        cols = [("tp", "zcc"), ("tp", "gloo"), ("fsdp", "zcc"), ("fsdp", "gloo")]
        print("%6s" % "step" + "".join("%16s" % ("%s %s" % c) for c in cols))
        for s in list(range(0, args.steps, args.every)) + [args.steps - 1]:
            print("%6d" % s + "".join("%16.9f" % curves[c][s].item() for c in cols))
        for prog in ("tp", "fsdp"):
            z, g = curves[prog, "zcc"], curves[prog, "gloo"]
            rel = ((z - g).abs() / g.abs().clamp_min(1e-12)).max().item()
            close = rel <= args.rtol
            print("%s: max relative |loss zcc - loss gloo| = %.3g: %s"
                  % (prog, rel, "agree" if close else "DIFFER"))
            k = max(1, args.steps // 5)
            first, last = g[:k].mean().item(), g[-k:].mean().item()
            down = last < first
            if not down:
                print("%s: the loss did not go down (mean of the first %d steps %.4f, of "
                      "the last %d %.4f)" % (prog, k, first, k, last))
            ok = ok and close and down
        print("losses agree" if ok else "LOSSES DIFFER")
    flag = torch.tensor([int(ok)])
    dist.broadcast(flag, 0, group=gloo)
    meshes = None
    dist.destroy_process_group()
    gloo = None  # see examples/ddp_train.py: free the gloo group while the interpreter is whole
    gc.collect()
    if not flag.item():
        sys.exit(1)


def main():
    args = parse()
    why = missing_api()
    if why:
        print("dtensor_fsdp_train: skipped: torch %s has %s" % (torch.__version__, why))
        return
    # The ranks' store, served from here on a port the kernel keeps for it
    # (see ddp_train.py).
    server = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)
    args.port = server.port
    mp.spawn(worker, args=(args.nprocs, args), nprocs=args.nprocs)


if __name__ == "__main__":
    main()
