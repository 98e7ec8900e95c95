#!/usr/bin/env python3
"""DDP training with zcc, checked against torch's own backend.

Trains the same MLP on the same generated data three times, in one set of
processes, and prints the three loss curves:
  zcc   DDP over the torch.distributed backend "zcc",
  ref   DDP over torch's backend (gloo on CPU, nccl on GPU),
  hook  DDP over torch's backend, gradients averaged by zcc.torch.allreduce_hook.
The curves must agree to float tolerance; the script exits 1 if they do not.

    python3 examples/ddp_train.py                    # 2 processes, CPU, gloo
    python3 examples/ddp_train.py --nprocs 4 --steps 300
    torchrun --nproc-per-node 2 examples/ddp_train.py --device cuda   # nccl

Run from a source checkout it finds python/zcc and build/src/libzcc.so;
otherwise `pip install ./python` first (or set ZCC_LIBRARY).
"""
import argparse
import gc
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nprocs", type=int, default=2, help="processes to spawn (not under torchrun)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--reference", default=None, help="torch backend to compare with "
                   "(default: gloo on cpu, nccl on cuda)")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--atol", type=float, default=1e-6)
    p.add_argument("--every", type=int, default=25, help="print a curve point every N steps")
    a = p.parse_args()
    a.reference = a.reference or ("nccl" if a.device == "cuda" else "gloo")
    return a


def make_data(n, dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, 1, generator=g)
    y = torch.sin(x @ w) + 0.1 * (x ** 2).sum(1, keepdim=True) / dim
    return x, y


def make_model(dim):
    torch.manual_seed(1234)  # every run and rank starts from the same weights
    return torch.nn.Sequential(torch.nn.Linear(dim, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 1))


def train(args, rank, world, device, group, hook_state=None):
    import zcc.torch
    dim = 16
    x, y = make_data(args.batch * world * 8, dim)
    model = make_model(dim).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
              process_group=group)
    if hook_state is not None:
        ddp.register_comm_hook(hook_state, zcc.torch.allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    losses = []
    nbatches = x.shape[0] // (args.batch * world)
    for step in range(args.steps):
        b = step % nbatches
        lo = (b * world + rank) * args.batch
        xb, yb = x[lo:lo + args.batch].to(device), y[lo:lo + args.batch].to(device)
        # Markers for `zcc_trace heatmap` (written only with ZCC_TRACE_FILE set).
        with zcc.torch.step():
            with zcc.torch.compute("forward+backward"):
                loss = torch.nn.functional.mse_loss(ddp(xb), yb)
                opt.zero_grad()
                loss.backward()
            opt.step()
        losses.append(loss.detach())
    # the mean loss over ranks, step by step, through the reference backend
    curve = torch.stack(losses).float()
    dist.all_reduce(curve, group=args.ref_group)
    return (curve / world).cpu()


def worker(rank, world, args):
    import zcc.torch
    if args.device == "cuda":
        # Ranks share GPUs when there are more ranks than GPUs (zcc allows it).
        local = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    if "RANK" in os.environ:  # torchrun
        dist.init_process_group("zcc")
    else:
        dist.init_process_group("zcc", init_method="tcp://127.0.0.1:%d" % args.port,
                                rank=rank, world_size=world)
    args.ref_group = dist.new_group(backend=args.reference)
    curves = {
        "zcc": train(args, rank, world, device, None),
        args.reference: train(args, rank, world, device, args.ref_group),
        "hook": train(args, rank, world, device, args.ref_group,
                      hook_state=zcc.torch.hook_state()),
    }
    ok = True
    if rank == 0:
        names = list(curves)
        print("DDP, %d ranks on %s, %d steps, zcc %s, torch %s"
              % (world, args.device, args.steps, zcc.__version__, torch.__version__))
        print("%6s" % "step" + "".join("%14s" % ("loss " + n) for n in names))
        for s in list(range(0, args.steps, args.every)) + [args.steps - 1]:
            print("%6d" % s + "".join("%14.7f" % curves[n][s].item() for n in names))
        ref = curves[args.reference]
        for n in ("zcc", "hook"):
            diff = (curves[n] - ref).abs().max().item()
            close = torch.allclose(curves[n], ref, rtol=args.rtol, atol=args.atol)
            print("max |loss %s - loss %s| = %.3g: %s" % (n, args.reference, diff,
                                                         "agree" if close else "DIFFER"))
            ok = ok and close
        first, last = ref[0].item(), ref[-1].item()
        if not last < first:
            print("the loss did not go down (%.4f -> %.4f)" % (first, last))
            ok = False
        print("losses agree" if ok else "LOSSES DIFFER")
    # On the reference group's device: a "nccl" group takes CUDA tensors only.
    flag = torch.tensor([int(ok)], device=device if args.reference == "nccl" else "cpu")
    dist.broadcast(flag, 0, group=args.ref_group)
    dist.destroy_process_group()
    # Free the reference group now, while the interpreter is whole: with
    # torch 2.x a gloo group left to interpreter shutdown sometimes aborts
    # the process ("terminate called without an active exception").
    args.ref_group = None
    gc.collect()
    if not flag.item():
        sys.exit(1)


def main():
    args = parse()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        args.port = s.getsockname()[1]
    mp.spawn(worker, args=(args.nprocs, args), nprocs=args.nprocs)


if __name__ == "__main__":
    main()
