#!/usr/bin/env python3
"""DDP training with zcc, checked against torch's own backend.

Trains the same MLP on the same generated data three times, in one set of
processes, and prints the three loss curves:
  zcc   DDP over the torch.distributed backend "zcc",
  ref   DDP over torch's backend (the reference below),
  hook  DDP over the reference backend, gradients averaged by
        zcc.torch.allreduce_hook.
The curves must agree, and so must the trained weights; the script exits 1
if they do not.

    python3 examples/ddp_train.py                    # 2 processes, CPU, gloo
    python3 examples/ddp_train.py --nprocs 4 --steps 300
    python3 examples/ddp_train.py --device cuda      # 2 processes on the GPUs there are
    torchrun --nproc-per-node 2 examples/ddp_train.py --device cuda

With --device cuda each process takes GPU LOCAL_RANK (else its rank) modulo
the GPUs there are: 2 processes on a machine of one GPU share cuda:0, which
zcc allows. The reference backend is torch's "nccl" where every rank has a
GPU of its own, and "gloo" where ranks share a GPU (NCCL refuses two ranks on
one GPU); gloo runs on the same CUDA tensors (it copies them through the
host), so all three runs do the same arithmetic on the same GPU.

Why the comparison can be exact (--exact, the default at 2 ranks): every run
starts from the same weights, feeds each rank the same batches and runs the
same kernels on the same device, so the runs differ only in how gradients
are averaged. DDP without a hook multiplies each gradient by 1/2 and sums
them, in both the zcc and the reference run: a sum of two numbers has one
rounding whatever the order, so both get the same bits. The hook sums and
divides by 2 (zccAvg): halving is exact in binary floating point (barring
subnormals), so (a + b) / 2 rounds to the same bits as a/2 + b/2. The loss
curves and the trained weights are then bitwise equal. With more ranks the
order of the sums differs between libraries, and they agree to --rtol/--atol.

Run from a source checkout it finds python/zcc and build/src/libzcc.so;
otherwise `pip install ./python` first (or set ZCC_LIBRARY).
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
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nprocs", type=int, default=2, help="processes to spawn (not under torchrun)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--reference", default=None, help="torch backend to compare with "
                   "(default: gloo on cpu; on cuda nccl, or gloo where ranks share a GPU)")
    p.add_argument("--exact", choices=["auto", "yes", "no"], default="auto",
                   help="require bitwise equal curves and weights (auto: at 2 ranks)")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--atol", type=float, default=1e-6)
    p.add_argument("--every", type=int, default=25, help="print a curve point every N steps")
    p.add_argument("--profile", metavar="DIR", default=None,
                   help="write a torch profiler trace of the zcc run, DIR/torch.RANK.json "
                   "(for zcc_trace heatmap --torch)")
    return p.parse_args()


def pick_reference(args, world):
    if args.reference:
        return args.reference
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))  # ranks on this machine
    if args.device == "cuda" and torch.cuda.device_count() < local_world:
        return "gloo"  # ranks share a GPU: NCCL refuses that; gloo takes CUDA tensors
    return "nccl" if args.device == "cuda" else "gloo"


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


def train(args, rank, world, device, group, hook_state=None, mark=False):
    """One training run. mark: this run writes the step and compute markers
    (and, with --profile, the torch profiler trace)."""
    import contextlib
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
    step_mark = zcc.torch.step if mark else contextlib.nullcontext
    compute_mark = zcc.torch.compute if mark else (lambda name: contextlib.nullcontext())
    profiling = mark and args.profile
    prof = contextlib.nullcontext()
    if profiling:
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        prof = profile(activities=acts)
    with prof:
        for step in range(args.steps):
            b = step % nbatches
            lo = (b * world + rank) * args.batch
            xb, yb = x[lo:lo + args.batch].to(device), y[lo:lo + args.batch].to(device)
            # Markers for `zcc_trace heatmap` (written only with ZCC_TRACE_FILE set).
            with step_mark():
                with compute_mark("forward+backward"):
                    loss = torch.nn.functional.mse_loss(ddp(xb), yb)
                    opt.zero_grad()
                    loss.backward()
                opt.step()
            losses.append(loss.detach())
    if profiling:
        os.makedirs(args.profile, exist_ok=True)
        prof.export_chrome_trace(os.path.join(args.profile, "torch.%d.json" % rank))
    # the mean loss over ranks, step by step, through the reference backend
    curve = torch.stack(losses).float()
    dist.all_reduce(curve, group=args.ref_group)
    weights = torch.cat([q.detach().reshape(-1) for q in model.parameters()]).cpu()
    return (curve / world).cpu(), weights


def worker(rank, world, args):
    import zcc.torch
    if args.device == "cuda":
        # cuBLAS picks the same kernels run after run with a fixed workspace
        # (before its first call): the three runs must do the same arithmetic.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
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
        store = dist.TCPStore("127.0.0.1", args.port, None, False)
        dist.init_process_group("zcc", store=store, rank=rank, world_size=world)
    args.reference = pick_reference(args, world)
    exact = args.exact == "yes" or (args.exact == "auto" and world == 2)
    args.ref_group = dist.new_group(backend=args.reference)
    runs = {
        "zcc": train(args, rank, world, device, None, mark=True),
        args.reference: train(args, rank, world, device, args.ref_group),
        "hook": train(args, rank, world, device, args.ref_group,
                      hook_state=zcc.torch.hook_state()),
    }
    curves = {n: c for n, (c, _) in runs.items()}
    ok = True
    if rank == 0:
        names = list(curves)
        where = args.device
        if device.type == "cuda":
            shared = torch.cuda.device_count() < int(os.environ.get("LOCAL_WORLD_SIZE", world))
            where = "cuda (%d GPU(s): ranks %s)" % (torch.cuda.device_count(),
                                                    "share GPUs" if shared else "one GPU each")
        print("DDP, %d ranks on %s, %d steps, zcc %s, torch %s, reference %s, %s"
              % (world, where, args.steps, zcc.__version__, torch.__version__, args.reference,
                 "bitwise" if exact else "rtol %g atol %g" % (args.rtol, args.atol)))
        print("%6s" % "step" + "".join("%14s" % ("loss " + n) for n in names))
        for s in list(range(0, args.steps, args.every)) + [args.steps - 1]:
            print("%6d" % s + "".join("%14.7f" % curves[n][s].item() for n in names))
        ref, ref_w = runs[args.reference]
        for n in ("zcc", "hook"):
            curve, w = runs[n]
            diff = (curve - ref).abs().max().item()
            wdiff = (w - ref_w).abs().max().item()
            if exact:
                close = torch.equal(curve, ref) and torch.equal(w, ref_w)
            else:
                close = torch.allclose(curve, ref, rtol=args.rtol, atol=args.atol)
            print("max |loss %s - loss %s| = %.3g, max |weight difference| = %.3g: %s"
                  % (n, args.reference, diff, wdiff,
                     ("bitwise equal" if exact else "agree") if close else "DIFFER"))
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
    # This process serves the ranks' store, on a port the kernel picks and
    # keeps: a port found free and then let go can be taken by someone else
    # (or by a rank's own connect to it) before rank 0 listens there.
    server = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)
    args.port = server.port
    mp.spawn(worker, args=(args.nprocs, args), nprocs=args.nprocs)


if __name__ == "__main__":
    main()
