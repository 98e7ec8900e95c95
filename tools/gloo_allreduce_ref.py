#!/usr/bin/env python3
"""gloo's allreduce over the same sweep as allreduce_perf, for comparison.

Forks N local ranks that run torch.distributed's gloo backend on CPU
tensors (float32 sum, out of place as allreduce_perf's first columns: the
input is copied into the output tensor, which gloo then reduces in place,
and the copy is timed with it), times each iteration with a monotonic clock
after warm-up, takes the slowest rank's time per iteration and prints the
median in allreduce_perf's row format, so tools/compare_mpi.sh --gloo can
set it beside zcc and Open MPI.

usage: gloo_allreduce_ref.py [-np N] [-b min] [-e max] [-f factor]
                             [-n iters] [-w warmup]
Needs a python with torch (Debian's python3-torch: /usr/bin/python3).
"""
import argparse
import os
import statistics
import sys
import time


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    if t and t[-1] in mult:
        return int(t[:-1]) * mult[t[-1]]
    return int(t)


def sizes(lo, hi, factor):
    s = lo
    while s <= hi:
        yield s
        s *= factor


def rank_main(rank, nranks, port, args, out_fd):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.TCPStore("127.0.0.1", port, None, False),
                            rank=rank, world_size=nranks)
    rows = []
    for size in sizes(args.b, args.e, args.f):
        count = size // 4
        if count == 0:
            continue
        src = torch.full((count,), float(rank + 1), dtype=torch.float32)
        dst = torch.empty_like(src)
        for _ in range(args.w):
            dst.copy_(src)
            dist.all_reduce(dst)
        times = torch.empty(args.n, dtype=torch.float64)
        for i in range(args.n):
            t0 = time.perf_counter()
            dst.copy_(src)
            dist.all_reduce(dst)
            times[i] = (time.perf_counter() - t0) * 1e6
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        expect = nranks * (nranks + 1) / 2
        wrong = int((dst != expect).sum())
        t = statistics.median(times.tolist())
        algbw = size / t / 1e3
        busbw = algbw * 2 * (nranks - 1) / nranks
        rows.append(f"{size:12d}  {count:12d}  {'float':>8}  {'sum':>6}  {-1:6d}  "
                    f"{t:8.2f}  {algbw:7.2f}  {busbw:7.2f}  {wrong:6d}\n")
    dist.destroy_process_group()
    if rank == 0:
        os.write(out_fd, "".join(rows).encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-np", type=int, default=2)
    ap.add_argument("-b", type=parse_size, default=8)
    ap.add_argument("-e", type=parse_size, default=32 << 20)
    ap.add_argument("-f", type=int, default=2)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    args = ap.parse_args()
    if args.np < 1 or args.f < 2 or args.b < 1 or args.e < args.b or args.n < 1 or args.w < 0:
        ap.error("expected -np >= 1, -f >= 2, 1 <= -b <= -e, -n >= 1, -w >= 0")
    try:
        import torch  # noqa: F401  (fail here, once, not in every rank)
    except ImportError:
        sys.exit(f"gloo_allreduce_ref: {sys.executable} cannot import torch "
                 "(Debian: apt-get install python3-torch, run with /usr/bin/python3)")
    import torch
    # The ranks' store, served from here on a port the kernel picked and
    # keeps (a port found free and let go can be taken before a rank listens).
    import torch.distributed as dist
    server = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)
    port = server.port
    r, w = os.pipe()
    pids = []
    for rank in range(args.np):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 0
            try:
                rank_main(rank, args.np, port, args, w)
            except BaseException as e:  # report and exit: never return into the parent's loop
                print(f"gloo_allreduce_ref: rank {rank}: {e}", file=sys.stderr)
                code = 1
            os._exit(code)
        pids.append(pid)
    os.close(w)
    out = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        out += chunk
    failed = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        failed |= status != 0
    print(f"# gloo_allreduce_ref: torch {torch.__version__}, {args.np} ranks, gloo all_reduce float sum")
    print("#       size         count      type   redop    root     time   algbw   busbw #wrong")
    sys.stdout.write(out.decode())
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
