#!/usr/bin/env python3
"""Medians over the rounds of stores_ab.sh's output (stdin): for each mode and
size, the median out-of-place and in-place busbw (GB/s), and each zcc mode's
out-of-place median over Open MPI's."""
import statistics
import sys

runs = {}
for line in sys.stdin:
    if ":" not in line or line[0].isdigit():
        continue
    mode, rest = line.split(":", 1)
    for cell in rest.split():
        size, bw = cell.split(":")
        oop, ip = (float(v) for v in bw.split("/"))
        runs.setdefault(mode.strip(), {}).setdefault(int(float(size)), []).append((oop, ip))
sizes = sorted({s for m in runs.values() for s in m})
print("medians over rounds, GB/s out of place / in place (rounds)")
print("%-7s" % "KiB" + "".join("%14d" % s for s in sizes))
for mode in ("timed", "stream", "plain", "mpi"):
    if mode not in runs:
        continue
    row = []
    for s in sizes:
        v = runs[mode].get(s, [])
        row.append("%6.2f/%-5.2f(%d)" % (statistics.median(x[0] for x in v),
                                         statistics.median(x[1] for x in v), len(v)) if v else "-")
    print("%-7s" % mode + "".join("%14s" % c for c in row))
if "mpi" in runs:
    print("out of place, median over Open MPI's median")
    for mode in ("timed", "stream", "plain"):
        if mode in runs:
            print("%-7s" % mode + "".join(
                "%14.2f" % (statistics.median(x[0] for x in runs[mode][s]) /
                            statistics.median(x[0] for x in runs["mpi"][s])) for s in sizes))
