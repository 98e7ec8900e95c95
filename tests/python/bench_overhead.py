#!/usr/bin/env python3
"""Per-call cost of the Python layer: Communicator.all_reduce against the C
function zccAllReduce called directly through ctypes with preallocated
arguments, on an 8-byte tensor (2 x float32), host communicators.

    ZCC_LIBRARY=build/src/libzcc.so /usr/bin/python3 tests/python/bench_overhead.py

Each call is timed on its own (time.perf_counter_ns); the two ways alternate
in rounds so that drift hits both alike; medians are printed, and their
difference is what the Python layer adds. With 2 ranks both processes run
the same sequence in lockstep. Not a pytest file: pytest does not collect it.
"""
import argparse
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))


def measure(comm, rounds, calls, warmup):
    import torch
    from zcc import _lib
    t = torch.zeros(2, dtype=torch.float32)  # 8 bytes
    f = _lib.zccAllReduce
    ptr, h = t.data_ptr(), comm.handle
    clock = time.perf_counter_ns
    direct, wrapped = [], []
    for _ in range(warmup):
        f(ptr, ptr, 2, 7, 0, h, None)
        comm.all_reduce(t)
    for _ in range(rounds):
        for _ in range(calls):
            t0 = clock()
            rc = f(ptr, ptr, 2, 7, 0, h, None)
            direct.append(clock() - t0)
            if rc:
                raise RuntimeError("zccAllReduce returned %d" % rc)
        for _ in range(calls):
            t0 = clock()
            comm.all_reduce(t)
            wrapped.append(clock() - t0)
    return direct, wrapped


def rank_main(rank, size, uid, args, q):
    import torch
    torch.set_num_threads(1)
    import zcc
    comm = zcc.Communicator.from_unique_id(uid, rank, size, device="host")
    d, w = measure(comm, args.rounds, args.calls, args.warmup)
    comm.destroy()
    q.put((rank, d, w))


def report(label, d, w):
    md, mw = statistics.median(d) / 1e3, statistics.median(w) / 1e3
    print("| %s | %d | %.2f | %.2f | %.2f |" % (label, len(d), md, mw, mw - md))
    return mw - md


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--calls", type=int, default=1000, help="calls per way per round")
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--ranks", default="1,2")
    args = p.parse_args()
    import torch
    import zcc
    print("zcc %s (%s), torch %s, Python %s, %s, %d cores"
          % (zcc.__version__, zcc.LIB_PATH, torch.__version__, platform.python_version(),
             platform.platform(), os.cpu_count()))
    print("| ranks | calls timed (each way, per rank) | C direct median us | "
          "Communicator.all_reduce median us | added us |")
    print("|---|---|---|---|---|")
    worst = 0.0
    for n in (int(x) for x in args.ranks.split(",")):
        uid = zcc.get_unique_id().to_bytes()  # this process serves the rendezvous
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        procs = [ctx.Process(target=rank_main, args=(r, n, uid, args, q)) for r in range(n)]
        for pr in procs:
            pr.start()
        res = sorted(q.get(timeout=600) for _ in procs)
        for pr in procs:
            pr.join()
        for rank, d, w in res:
            worst = max(worst, report("%d (rank %d)" % (n, rank), d, w))
    print("largest added cost: %.2f us per call" % worst)


if __name__ == "__main__":
    main()
