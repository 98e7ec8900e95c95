#!/usr/bin/env python3
"""Tests of the flight recorder, the trace and zcc_trace (ctest -L trace).

  test_trace.py CASE --driver build/tests/trace/test_trace --tool build/tools/zcc_trace

CASE: straggler, summary, mismatch, p2p, fork, schema, heatmap, heatmap-torch, unwritable, corrupt, markers;
gpu (on a GPU host: --driver is allreduce_perf).
Each prints what it checked and exits 1 on the first failure.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg):
    print("FAILED: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok: " + msg)


def run(cmd, env=None, timeout=120):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def driver(args, mode, d):
    rc, out, err = run([args.driver, mode, d])
    sys.stdout.write(out)
    sys.stderr.write(err[-4000:])
    check(rc == 0, "test_trace %s exits 0 (got %d)" % (mode, rc))


def tool(args, *argv):
    return run([sys.executable, args.tool] + list(argv))


# ---- Chrome trace schema ----

PHASES = {"X", "B", "E", "M", "i", "I", "C"}
ZCC_ARGS = {"comm": str, "hash": str, "rank": int, "nranks": int, "seq": int, "p2p": int,
            "coll": str, "bytes": int, "count": int, "dtype": str, "op": str, "algo": str,
            "transports": str, "state": str, "result": int, "gpu": int,
            "enqueue_us": (int, float), "wait_us": (int, float), "wait_peer": int,
            "peer_wait_us": dict}
DUMP_OP = {"seq": int, "p2p": int, "coll": str, "state": str, "result": int, "bytes": int,
           "count": int, "dtype": str, "op": str, "algo": str, "transports": str, "gpu": int,
           "enqueue_us": (int, float), "start_us": (int, float), "end_us": (int, float),
           "gpu_start_us": (int, float), "gpu_end_us": (int, float), "wait_us": (int, float),
           "wait_peer": int, "wait_peer_us": (int, float), "pred_us": (int, float)}


def typed(obj, spec, where):
    for k, t in spec.items():
        if k not in obj:
            fail("%s: no \"%s\"" % (where, k))
        if isinstance(obj[k], bool) or not isinstance(obj[k], t):
            fail("%s: \"%s\" is %r, expected %s" % (where, k, obj[k], t))


def validate_chrome_trace(path):
    """The JSON Object Format of the Trace Event Format, and zcc's own args."""
    with open(path) as f:
        doc = json.load(f)  # the whole file is one JSON document
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        fail("%s: no traceEvents list" % path)
    if doc.get("displayTimeUnit") not in (None, "ms", "ns"):
        fail("%s: displayTimeUnit %r" % (path, doc.get("displayTimeUnit")))
    stacks, nx = {}, 0
    last_ts = {}
    for i, e in enumerate(doc["traceEvents"]):
        where = "%s: traceEvents[%d]" % (path, i)
        typed(e, {"name": str, "ph": str, "pid": int, "tid": int}, where)
        if e["ph"] not in PHASES:
            fail("%s: phase %r" % (where, e["ph"]))
        if e["ph"] != "M":
            typed(e, {"ts": (int, float)}, where)
            if e["ts"] <= 0:
                fail("%s: ts %r" % (where, e["ts"]))
        if "args" in e and not isinstance(e["args"], dict):
            fail("%s: args is not an object" % where)
        if e["ph"] == "X":
            nx += 1
            typed(e, {"dur": (int, float), "cat": str}, where)
            if e["dur"] < 0:
                fail("%s: negative dur" % where)
            if e["cat"] == "zcc":
                typed(e["args"], ZCC_ARGS, where + ".args")
                key = (e["pid"], e["tid"])
                if e["ts"] + 1e-3 < last_ts.get(key, 0):
                    fail("%s: ops of one rank out of order" % where)
                last_ts[key] = e["ts"]
        if e["ph"] in ("B", "E"):
            key = (e["pid"], e["tid"])
            st = stacks.setdefault(key, [])
            if e["ph"] == "B":
                st.append(e)
            else:
                if not st:
                    fail("%s: E without B" % where)
                b = st.pop()
                if e["ts"] < b["ts"]:
                    fail("%s: E before its B" % where)
    for key, st in stacks.items():
        if st:
            fail("%s: %d unclosed B events on pid/tid %s" % (path, len(st), key))
    return doc, nx


def case_schema(args, d):
    driver(args, "mix", d)
    colls = set()
    for r in range(2):
        doc, nx = validate_chrome_trace(os.path.join(d, "trace.%d.json" % r))
        check(nx >= 3 * 7, "trace.%d.json is a valid Chrome trace with %d ops" % (r, nx))
        ops = [e for e in doc["traceEvents"] if e.get("cat") == "zcc"]
        colls |= {e["name"] for e in ops}
        seqs = [e["args"]["seq"] for e in ops if not e["args"]["p2p"]]
        check(seqs == list(range(1, len(seqs) + 1)),
              "rank %d: collective sequence numbers run 1..%d" % (r, len(seqs)))
        check(all(e["args"]["transports"] == "shm" for e in ops if e["args"]["nranks"] > 1),
              "rank %d: every op names the shm transport" % r)
        check(all(e["args"]["algo"] in ("oneshot", "ring") for e in ops),
              "rank %d: every op names oneshot or ring" % r)
        p2p = [e for e in ops if e["args"]["p2p"]]
        check(len(p2p) == 3 and all(e["args"]["peer"] == 1 - r for e in p2p)
              and all(e["args"]["bytes"] == 2 * 16384 * 4 for e in p2p),
              "rank %d: 3 grouped send/recv ops with peer %d and both directions' bytes"
              % (r, 1 - r))
        marks = [e for e in doc["traceEvents"] if e.get("cat") in ("step", "compute")]
        check(len(marks) == 12, "rank %d: 12 step/compute marker events" % r)
        with open(os.path.join(d, "fr.%d.json" % r)) as f:
            dump = json.load(f)
        typed(dump, {"zcc_flight_recorder": int, "rank": int, "nranks": int, "hash": str,
                     "ops": list, "dump_time_us": (int, float), "reason": str}, "dump")
        for i, o in enumerate(dump["ops"]):
            typed(o, DUMP_OP, "fr.%d.json ops[%d]" % (r, i))
        check(len(dump["ops"]) == 21 and all(o["state"] == "done" for o in dump["ops"]),
              "rank %d: zccCommDump holds all 21 ops, done" % r)
        with open(os.path.join(d, "concurrent.%d.json" % r)) as f:
            conc = json.load(f)
        for i, o in enumerate(conc["ops"]):
            typed(o, DUMP_OP, "concurrent.%d.json ops[%d]" % (r, i))
        check(all(o["state"] in ("enqueued", "started", "done") for o in conc["ops"]),
              "rank %d: the last dump taken by a second thread during the run is complete"
              % r)
    check(colls == {"allreduce", "broadcast", "reduce", "allgather", "reducescatter",
                    "alltoall", "sendrecv"}, "every collective is traced: %s" % sorted(colls))
    rc, out, err = tool(args, "stats", *[os.path.join(d, "trace.%d.json" % r) for r in range(2)])
    print(out)
    check(rc == 0 and "allreduce" in out and "64 KiB" in out and "latest rank" in out,
          "zcc_trace stats summarises the trace")
    # every collective's row carries the model's prediction of what ran
    rows = [l.split() for l in out.splitlines()
            if l.split() and l.split()[0] in ("allreduce", "broadcast", "reduce", "allgather",
                                               "reducescatter", "alltoall")]
    check(rows and all(float(r[-2]) > 0 and float(r[-1]) > 0 for r in rows),
          "zcc_trace stats gives every collective's predicted time and p50/pred (%d rows)"
          % len(rows))
    for r in range(2):
        with open(os.path.join(d, "fr.%d.json" % r)) as f:
            dump = json.load(f)
        check(all(o["pred_us"] > 0 for o in dump["ops"] if not o["p2p"]),
              "rank %d: every collective in the dump has the model's time (pred_us)" % r)


def case_straggler(args, d):
    driver(args, "straggler", d)
    dumps = [os.path.join(d, "fr.%d.json" % r) for r in range(4)]
    rc, out, err = tool(args, "report", *dumps)
    print(out + err)
    check(rc == 1, "report exits 1 on a hang (got %d)" % rc)
    check("ranks 0-2 wait in op #50 allreduce 4 KiB float32 sum" in out,
          "report: ranks 0-2 wait in op #50 allreduce")
    check("rank 3 last completed op #49" in out, "report: rank 3 last completed op #49")
    check("suspect rank 3" in out, "report names rank 3 as the suspect")
    # with more ranks than cores the allreduce gathers at rank 0 (host_plan.c):
    # rank 0 waits on rank 3, the others on rank 0
    check(re.search(r"waiting on (rank 3\b|.*\brank 3 \(rank)", out) is not None,
          "report: a rank waits on rank 3")
    # The traces agree, and the tool reads a mix of dumps and traces.
    traces = [os.path.join(d, "trace.%d.json" % r) for r in range(4)]
    for t in traces:
        validate_chrome_trace(t)
    rc, out, err = tool(args, "report", *traces)
    print(out + err)
    check(rc == 1 and "rank 3 last completed op #49" in out,
          "report from the traces alone names rank 3 and op #49")


def case_summary(args, d):
    rc, out, err = run([args.driver, "summary", d], env={"ZCC_DEBUG": "WARN"})
    print(out)
    lines = [l for l in err.splitlines() if "last operations:" in l]
    print("\n".join(lines))
    check(rc == 0, "test_trace summary exits 0 (got %d)" % rc)
    check(len(lines) >= 3, "ranks 0-2 log the last operations at WARN (%d lines)" % len(lines))
    r0 = [l for l in lines if re.search(r"comm \S+ rank 0 \(", l)]  # not "waiting on rank 0 ("
    check(r0 and "#49 allreduce 4 KiB done" in r0[0] and "#50 allreduce 4 KiB failed after" in r0[0]
          and "waiting on rank 3" in r0[0] and "ZCC_FLIGHT_RECORDER_FILE" in r0[0],
          "rank 0's summary: #49 done, #50 failed waiting on rank 3")


def case_mismatch(args, d):
    driver(args, "mismatch", d)
    rc, out, err = tool(args, "report", *[os.path.join(d, "fr.%d.json" % r) for r in range(4)])
    print(out + err)
    check(rc == 1, "report exits 1 on a mismatch")
    check("MISMATCH at op #10: ranks 0-1,3 called allreduce 4 KiB float32 sum; "
          "rank 2 called broadcast 4 KiB float32 root 0" in out,
          "report names rank 2's broadcast against the others' allreduce at op #10")


def case_fork(args, d):
    driver(args, "fork", d)
    doc, nx = validate_chrome_trace(os.path.join(d, "fork.json"))
    seqs = [e["args"]["seq"] for e in doc["traceEvents"] if e.get("cat") == "zcc"]
    check(seqs == list(range(1, 11)),
          "a child's exit in the middle leaves the parent's trace whole: ops %s" % seqs)


def case_p2p(args, d):
    driver(args, "p2p", d)
    rc, out, err = tool(args, "report", os.path.join(d, "fr.0.json"))
    print(out + err)
    check(rc == 1 and "rank 0 is in send/recv #1 (4 KiB with rank 1) (failed)" in out
          and "waiting on rank 1" in out,
          "report: rank 0 is stuck in a receive from rank 1")


def synthetic_trace(path, rank, steps):
    """steps: [(t0, [(compute s, e)], [(comm s, e)], t1)] in us."""
    ev = [{"name": "thread_name", "ph": "M", "pid": 100 + rank, "tid": rank,
           "args": {"name": "comm x", "rank": rank, "nranks": 2, "hash": "0x1", "comm": "x"}}]
    seq = 0
    for i, (t0, comps, comms, t1) in enumerate(steps):
        ev.append({"name": "step %d" % i, "cat": "step", "ph": "B", "pid": 100 + rank,
                   "tid": 100000 + rank, "ts": t0, "args": {"rank": rank}})
        for s, e in comps:
            ev.append({"name": "fwd", "cat": "compute", "ph": "B", "pid": 100 + rank,
                       "tid": 100001 + rank, "ts": s, "args": {}})
            ev.append({"name": "fwd", "cat": "compute", "ph": "E", "pid": 100 + rank,
                       "tid": 100001 + rank, "ts": e, "args": {}})
        for s, e in comms:
            seq += 1
            ev.append({"name": "allreduce", "cat": "zcc", "ph": "X", "pid": 100 + rank,
                       "tid": rank, "ts": s, "dur": e - s,
                       "args": {"comm": "x", "hash": "0x1", "rank": rank, "nranks": 2,
                                "seq": seq, "p2p": 0, "coll": "allreduce", "bytes": 4,
                                "state": "done"}})
        ev.append({"name": "step %d" % i, "cat": "step", "ph": "E", "pid": 100 + rank,
                   "tid": 100000 + rank, "ts": t1, "args": {}})
    with open(path, "w") as f:
        json.dump({"traceEvents": ev}, f)


def case_heatmap(args, d):
    b = 1000.0
    # rank 0: 0.5 (comp 80, comm 60, union 100), 1.0, 0.0, 0.375 (two comm pieces:
    # comp 80, comm 10 + 40, union 100)
    synthetic_trace(os.path.join(d, "s0.json"), 0, [
        (b, [(b, b + 80)], [(b + 40, b + 100)], b + 100),
        (b + 200, [(b + 200, b + 300)], [(b + 200, b + 300)], b + 300),
        (b + 400, [(b + 400, b + 450)], [(b + 450, b + 500)], b + 500),
        (b + 600, [(b + 600, b + 680)], [(b + 610, b + 620), (b + 660, b + 700)], b + 700),
    ])
    # rank 1: comm that spills out of the step counts only inside it: 0.9
    synthetic_trace(os.path.join(d, "s1.json"), 1, [
        (b, [(b, b + 100)], [(b + 10, b + 150)], b + 100),
    ])
    out_json = os.path.join(d, "ratios.json")
    png = os.path.join(d, "map.png")
    rc, out, err = tool(args, "heatmap", os.path.join(d, "s0.json"), os.path.join(d, "s1.json"),
                        "--json", out_json, "-o", png)
    print(out + err)
    check(rc == 0, "heatmap exits 0")
    with open(out_json) as f:
        got = json.load(f)
    want = {"0": [0.5, 1.0, 0.0, 0.375], "1": [0.9]}
    for r, ratios in want.items():
        have = [s["ratio"] for s in got[r]]
        check(len(have) == len(ratios) and all(abs(a - w) < 1e-9 for a, w in zip(have, ratios)),
              "rank %s ratios %s == %s" % (r, have, ratios))
    grades = [s["grade"] for s in got["0"]]
    check(grades == ["medium", "excellent", "poor", "medium"], "grades %s" % grades)
    check("0.500 M" in out and "1.000 E" in out and "0.000 P" in out, "the table shows grades")
    try:
        import matplotlib  # noqa: F401
        check(os.path.getsize(png) > 0, "the PNG was drawn")
    except ImportError:
        check("matplotlib is not installed" in err, "no matplotlib: said so, table printed")
    # Real markers from a run: compute then a blocking host collective: no overlap.
    driver(args, "mix", d)
    rc, out, err = tool(args, "heatmap", os.path.join(d, "trace.0.json"),
                        os.path.join(d, "trace.1.json"), "--json", out_json)
    print(out + err)
    with open(out_json) as f:
        got = json.load(f)
    check(rc == 0 and sorted(got) == ["0", "1"] and all(len(v) == 3 for v in got.values()),
          "heatmap of a real run: 3 steps for ranks 0 and 1")
    check(all(s["ratio"] < 0.2 and s["comp_us"] >= 4000 for v in got.values() for s in v),
          "compute then blocking collectives: ratios near 0, compute >= 4 ms")


def case_heatmap_torch(args, d):
    """heatmap --torch: compute from a torch profiler trace's GPU work (not
    zcc's or NCCL's kernels), communication from zcc's GPU spans, each
    taken in the step whose host span launched or enqueued it."""
    base_ns = 1700000000000000000  # the profiler's events are us after this
    b = base_ns / 1000.0
    host, gpu = b + 1000.0, b + 5000.0  # host step spans; the GPU runs later
    ev, pev = [], []
    for i in range(2):
        h, g = host + 1000 * i, gpu + 1000 * i
        ev.append({"name": "step %d" % i, "cat": "step", "ph": "B", "pid": 7, "tid": 100000,
                   "ts": h, "args": {"rank": 0}})
        ev.append({"name": "step %d" % i, "cat": "step", "ph": "E", "pid": 7, "tid": 100000,
                   "ts": h + 500, "args": {"rank": 0}})
        # the allreduce, enqueued at h + 100, ran on the GPU [g + 60, g + 100 + 60 i]
        ev.append({"name": "allreduce", "cat": "zcc", "ph": "X", "pid": 7, "tid": 0,
                   "ts": h + 100, "dur": 1.0,
                   "args": {"comm": "x", "hash": "0x1", "rank": 0, "nranks": 2, "seq": i + 1,
                            "p2p": 0, "coll": "allreduce", "bytes": 4, "state": "done",
                            "gpu": 1}})
        ev.append({"name": "allreduce", "cat": "zcc_gpu", "ph": "X", "pid": 7, "tid": 200000,
                   "ts": g + 60, "dur": 40.0 + 60 * i,
                   "args": {"hash": "0x1", "rank": 0, "seq": i + 1, "state": "done"}})
        # GPU work launched in the step: two kernels [g, g + 50], [g + 70, g + 80] and
        # a copy [g + 90, g + 100]; zcc's and NCCL's kernels are not compute
        kernels = [("gemm", g, 50), ("tanh", g + 70, 10), ("Memcpy DtoD", g + 90, 10),
                   ("void zcc_kernels::(anonymous namespace)::oneshot_ll_kernel", g + 60, 40),
                   ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", g + 60, 40)]
        for k, (name, ts, dur) in enumerate(kernels):
            corr = 100 * i + k
            pev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7,
                        "tid": 7, "ts": h + 10 + k - b, "dur": 2, "args": {"correlation": corr}})
            pev.append({"ph": "X", "cat": "gpu_memcpy" if "Memcpy" in name else "kernel",
                        "name": name, "pid": 0, "tid": 7, "ts": ts - b, "dur": dur,
                        "args": {"correlation": corr, "stream": 7}})
    # a kernel launched outside every step counts nowhere
    pev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7,
                "ts": host - 100 - b, "dur": 2, "args": {"correlation": 999}})
    pev.append({"ph": "X", "cat": "kernel", "name": "warmup", "pid": 0, "tid": 7,
                "ts": gpu - 10 - b, "dur": 100, "args": {"correlation": 999}})
    zpath, ppath = os.path.join(d, "gz.json"), os.path.join(d, "prof.json")
    with open(zpath, "w") as f:
        json.dump({"traceEvents": ev}, f)
    with open(ppath, "w") as f:
        json.dump({"traceEvents": pev, "baseTimeNanoseconds": base_ns,
                   "distributedInfo": {"backend": "zcc", "rank": 0, "world_size": 2}}, f)
    out_json = os.path.join(d, "gpu.json")
    rc, out, err = tool(args, "heatmap", zpath, "--torch", ppath, "--json", out_json)
    print(out + err)
    check(rc == 0 and "on the GPU" in out, "heatmap --torch exits 0 and says it is the GPU's")
    with open(out_json) as f:
        got = json.load(f)
    # step 0: comp 50 + 10 + 10 = 70, comm [60, 100] = 40, union [0, 50] + [60, 100] = 90:
    # both 20 -> 20/70; step 1: comm [60, 160], union 50 + 100: both 20 -> 20/70 again,
    # comm 100 (the spans after the last kernel count in comm, not in comp)
    rows = got.get("0", [])
    check(len(rows) == 2, "two GPU steps")
    want = [(20 / 70.0, 70, 40, 90), (20 / 70.0, 70, 100, 150)]
    for i, (row, (ratio, comp, comm, gap)) in enumerate(zip(rows, want)):
        check(abs(row["ratio"] - ratio) < 1e-9 and abs(row["comp_us"] - comp) < 1e-6
              and abs(row["comm_us"] - comm) < 1e-6 and abs(row["gap_us"] - gap) < 1e-6,
              "GPU step %d: %s == ratio %.4f comp %g comm %g gap %g" % (i, row, ratio, comp,
                                                                         comm, gap))
    # without --torch the same files give the host's view: no compute markers, ratio 0
    rc, out, err = tool(args, "heatmap", zpath, "--json", out_json)
    with open(out_json) as f:
        got = json.load(f)
    check(rc == 0 and all(r["ratio"] == 0 for r in got["0"]), "host view: no compute, 0")
    # a profiler trace without the rank is an error naming the file
    bad = os.path.join(d, "prof-norank.json")
    with open(bad, "w") as f:
        json.dump({"traceEvents": pev}, f)
    rc, out, err = tool(args, "heatmap", zpath, "--torch", bad)
    check(rc == 2 and "prof-norank.json" in err and "distributedInfo" in err,
          "a profile without distributedInfo: exit 2 naming the file (%s)" % err.strip())


def case_unwritable(args, d):
    rc, out, err = run([args.driver, "unwritable"], env={"ZCC_DEBUG": "WARN"})
    print(out + err)
    check(rc == 0, "two communicators with an unwritable ZCC_TRACE_FILE compute exact results")
    n = err.count("ZCC_TRACE_FILE: cannot open")
    check(n == 1, "the warning is printed once (got %d)" % n)
    check("/nonexistent-zcc-dir/trace." in err and "No such file or directory" in err,
          "the warning names the path and the cause")


def case_corrupt(args, d):
    driver(args, "mismatch", d)
    src = os.path.join(d, "fr.0.json")
    with open(src, "rb") as f:
        data = f.read()
    # Cut after the first op, as a rank killed while writing would leave it
    # (zcc itself writes a temporary file and renames it): the document ends
    # where a value is expected, at the end of the file.
    n = data.index(b"},", data.index(b'"ops"')) + 2
    cut = os.path.join(d, "cut.json")
    with open(cut, "wb") as f:
        f.write(data[:n])
    rc, out, err = tool(args, "report", cut)
    print(err)
    check(rc == 2 and cut in err and ("byte offset %d" % n) in err,
          "a truncated dump: exit 2, the file and byte offset %d (its end)" % n)
    bad = os.path.join(d, "bad.json")
    at = data.index(b'"ops"') + 3
    with open(bad, "wb") as f:
        f.write(data[:at] + b"\x01" + data[at + 1:])
    rc, out, err = tool(args, "stats", src, bad)
    print(err)
    check(rc == 2 and bad in err and ("byte offset %d" % at) in err,
          "a corrupt byte: exit 2, the file and byte offset %d" % at)
    other = os.path.join(d, "other.json")
    with open(other, "w") as f:
        f.write('{"x": 1}')
    rc, out, err = tool(args, "heatmap", other)
    check(rc == 2 and other in err and "neither" in err, "JSON that is not zcc's: exit 2")
    rc, out, err = tool(args, "report", os.path.join(d, "missing.json"))
    check(rc == 2 and "missing.json: cannot read" in err, "a missing file: exit 2")


def case_markers(args, d):
    """python/zcc/trace.py's step() and compute() write markers through zccTraceMark."""
    lib = args.lib
    env = {"PYTHONPATH": os.path.join(HERE, "..", "..", "python"), "ZCC_LIBRARY": lib,
           "ZCC_TRACE_FILE": os.path.join(d, "py.%r.json"), "ZCC_DEVICE": "host"}
    script = os.path.join(d, "markers.py")
    with open(script, "w") as f:
        f.write(
            "import sys, time, ctypes\n"
            "import zcc\n"
            "from zcc import _lib, trace\n"
            "h = ctypes.c_void_p()\n"
            "_lib.check(_lib.zccCommInitAll(ctypes.byref(h), 1, None), 'init')\n"
            "# Communicator needs torch to be constructed; its dump() does not\n"
            "comm = zcc.Communicator.__new__(zcc.Communicator)\n"
            "comm._h = h.value\n"
            "buf = (ctypes.c_float * 256)()\n"
            "for i in range(2):\n"
            "    with trace.step():\n"
            "        with trace.compute('fwd'):\n"
            "            time.sleep(0.004)\n"
            "        _lib.check(_lib.zccAllReduce(buf, buf, 256, 7, 0, comm.handle, None), 'ar')\n"
            "comm.dump(sys.argv[1])\n"
            "_lib.check(_lib.zccCommDestroy(h), 'destroy')\n")
    dump = os.path.join(d, "py-fr.%r.json")
    rc, out, err = run([sys.executable, script, dump], env=env)
    print(out + err)
    check(rc == 0, "a Python program with zcc.trace.step()/compute() runs")
    with open(os.path.join(d, "py-fr.0.json")) as f:
        fr = json.load(f)
    check(len(fr["ops"]) == 2 and fr["reason"] == "zccCommDump",
          "Communicator.dump wrote the flight recorder (2 ops)")
    path = os.path.join(d, "py.0.json")
    doc, nx = validate_chrome_trace(path)
    names = [(e["cat"], e["ph"]) for e in doc["traceEvents"] if e.get("cat") in ("step", "compute")]
    check(names.count(("step", "B")) == 2 and names.count(("compute", "E")) == 2,
          "2 steps and 2 compute spans in the trace")
    rc, out, err = tool(args, "heatmap", path)
    print(out + err)
    check(rc == 0 and "rank 0" in out, "heatmap reads the Python markers")


def case_gpu(args, d):
    """On a GPU host: --driver is allreduce_perf. Two ranks on GPU 0 trace 8 B to
    4 MiB; every GPU op has its GPU span (cat zcc_gpu), after its enqueue, the
    spans of a rank in order, and zcc_trace stats takes the GPU's times."""
    env = {"ZCC_TRACE_FILE": os.path.join(d, "trace.%r.json")}
    rc, out, err = run([args.driver, "-g", "2", "--share-gpus", "1", "-b", "8", "-e", "4M",
                        "-f", "4", "-w", "2", "-n", "10", "-c", "1"], env=env, timeout=300)
    sys.stdout.write(out[-2000:])
    sys.stderr.write(err[-2000:])
    check(rc == 0, "allreduce_perf with ZCC_TRACE_FILE exits 0 (got %d)" % rc)
    paths = [os.path.join(d, "trace.%d.json" % r) for r in range(2)]
    for p in paths:
        doc, nx = validate_chrome_trace(p)
        ev = doc["traceEvents"]
        host = {e["args"]["seq"]: e for e in ev if e.get("cat") == "zcc" and not e["args"]["p2p"]}
        gpu = [e for e in ev if e.get("cat") == "zcc_gpu"]
        check(host and all(e["args"]["gpu"] == 1 for e in host.values()),
              "%s: %d GPU collectives recorded" % (p, len(host)))
        check(len(gpu) == len(host), "%s: %d GPU spans for %d ops" % (p, len(gpu), len(host)))
        prev_end = 0.0
        for g in sorted(gpu, key=lambda e: e["args"]["seq"]):
            typed(g["args"], dict(ZCC_ARGS, gpu_start_us=(int, float), gpu_end_us=(int, float)),
                  "%s: GPU span #%d" % (p, g["args"]["seq"]))
            h = host.get(g["args"]["seq"])
            if not h:
                fail("%s: GPU span #%d has no op" % (p, g["args"]["seq"]))
            if g["ts"] < h["args"]["enqueue_us"] or g["ts"] + 1e-3 < prev_end:
                fail("%s: GPU span #%d at %.3f (dur %.3f): enqueued %.3f, previous span's end "
                     "%.3f" % (p, g["args"]["seq"], g["ts"], g["dur"], h["args"]["enqueue_us"],
                               prev_end))
            prev_end = g["ts"] + g["dur"]
        check(True, "%s: every GPU span after its enqueue, in order" % p)
    rc, out, err = tool(args, "stats", *paths)
    sys.stdout.write(out[-3000:])
    check(rc == 0 and "allreduce" in out, "zcc_trace stats on the GPU traces")


CASES = {"schema": case_schema, "straggler": case_straggler, "summary": case_summary,
         "mismatch": case_mismatch, "p2p": case_p2p, "fork": case_fork,
         "heatmap": case_heatmap, "heatmap-torch": case_heatmap_torch,
         "unwritable": case_unwritable, "corrupt": case_corrupt,
         "markers": case_markers, "gpu": case_gpu}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--driver", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--lib", default="")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="zcc-trace-%s-" % args.case)
    try:
        CASES[args.case](args, d)
    finally:
        if os.environ.get("ZCC_TEST_KEEP"):
            print("kept %s" % d)
        else:
            shutil.rmtree(d, ignore_errors=True)
    print("%s: passed" % args.case)


if __name__ == "__main__":
    main()
