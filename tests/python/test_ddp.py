"""examples/ddp_train.py (DDP over zcc, and zcc's hook) and
examples/dtensor_fsdp_train.py (DTensor, FSDP2) match gloo's losses."""
import os
import re
import subprocess
import sys

import pytest

import workers

EXAMPLE = os.path.join(workers.REPO, "examples", "ddp_train.py")


@pytest.mark.parametrize("nprocs", [2, 4])
def test_ddp_example_matches_gloo(nprocs):
    p = subprocess.run([sys.executable, EXAMPLE, "--nprocs", str(nprocs), "--steps", "200"],
                       capture_output=True, text=True, timeout=240)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "losses agree" in out, out
    # three curves side by side, the same to float tolerance
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s+\d+\s+\d", line)]
    assert len(rows) >= 8, out
    for row in rows:
        zcc_loss, gloo_loss, hook_loss = map(float, row[1:4])
        assert zcc_loss == pytest.approx(gloo_loss, rel=1e-4, abs=1e-6), row
        assert hook_loss == pytest.approx(gloo_loss, rel=1e-4, abs=1e-6), row
    assert float(rows[-1][2]) < float(rows[0][2]), "the loss did not go down"


DTENSOR_EXAMPLE = os.path.join(workers.REPO, "examples", "dtensor_fsdp_train.py")


@pytest.mark.parametrize("nprocs", [2, 4])
def test_dtensor_fsdp_example_matches_gloo(nprocs):
    """DTensor tensor parallel and FSDP2 over zcc: 50 steps whose losses
    match gloo's to 1e-5 relative (the example checks and prints both)."""
    p = subprocess.run([sys.executable, DTENSOR_EXAMPLE, "--nprocs", str(nprocs),
                        "--steps", "50"], capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    if p.returncode == 0 and "dtensor_fsdp_train: skipped" in out:
        pytest.skip(out.strip().splitlines()[-1])
    assert p.returncode == 0, out
    assert "losses agree" in out, out
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s+\d+\s+\d", line)]
    assert len(rows) >= 5, out
    for row in rows:
        tp_zcc, tp_gloo, fsdp_zcc, fsdp_gloo = map(float, row[1:5])
        assert tp_zcc == pytest.approx(tp_gloo, rel=1e-5), row
        assert fsdp_zcc == pytest.approx(fsdp_gloo, rel=1e-5), row


def _overlap_by_sweep(step, comps, comms):
    """The time compute and communication both run inside step, and the
    compute time there (a sweep over the span ends, independent of
    zcc_trace's union arithmetic)."""
    lo, hi = step
    edges = []
    for kind, spans in ((0, comps), (1, comms)):
        for s, e in spans:
            s, e = max(s, lo), min(e, hi)
            if e > s:
                edges += [(s, kind, 1), (e, kind, -1)]
    edges.sort(key=lambda x: (x[0], -x[2]))
    active, both, comp, last = [0, 0], 0.0, 0.0, None
    for t, kind, d in edges:
        if last is not None:
            if active[0] > 0:
                comp += t - last
                if active[1] > 0:
                    both += t - last
        active[kind] += d
        last = t
    return both, comp


def test_ddp_trace_heatmap(tmp_path):
    """The trace of a DDP run on CPU (examples/ddp_train.py under
    ZCC_TRACE_FILE) turned into zcc_trace heatmap's overlap ratios, checked
    step by step against the same ratios computed here from the raw trace."""
    import json
    steps = 20
    env = dict(os.environ, ZCC_TRACE_FILE=str(tmp_path / "zcc.%p.json"))
    p = subprocess.run([sys.executable, EXAMPLE, "--nprocs", "2", "--steps", str(steps)],
                       capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    traces = sorted(str(f) for f in tmp_path.glob("zcc.*.json"))
    assert len(traces) == 2, traces
    tool = os.path.join(workers.REPO, "tools", "zcc_trace")
    out_json = tmp_path / "map.json"
    q = subprocess.run([sys.executable, tool, "heatmap", *traces, "--json", str(out_json)],
                       capture_output=True, text=True, timeout=60)
    assert q.returncode == 0, q.stdout + q.stderr
    table = json.loads(out_json.read_text())
    assert sorted(table) == ["0", "1"], table.keys()
    for path in traces:
        doc = json.load(open(path))
        ev = doc["traceEvents"]
        ranks = {e["args"]["rank"] for e in ev if e.get("cat") == "zcc"}
        assert len(ranks) == 1, ranks
        rank = ranks.pop()
        opened, spans = {}, {"step": [], "compute": []}
        for e in ev:
            if e.get("cat") in spans and e.get("ph") in ("B", "E"):
                if e["ph"] == "B":
                    opened.setdefault(e["cat"], []).append(float(e["ts"]))
                else:
                    spans[e["cat"]].append((opened[e["cat"]].pop(), float(e["ts"])))
        comms = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in ev
                 if e.get("cat") == "zcc" and e.get("ph") == "X" and not e["args"].get("p2p")]
        rows = table[str(rank)]
        assert len(spans["step"]) == steps and len(rows) == steps, (len(spans["step"]), len(rows))
        for st, row in zip(sorted(spans["step"]), rows):
            both, comp = _overlap_by_sweep(st, spans["compute"], comms)
            want = 0.0 if comp <= 0 else min(1.0, both / comp)
            assert 0.0 <= row["ratio"] <= 1.0, row
            assert row["ratio"] == pytest.approx(want, abs=1e-6), (row, want)
            assert row["comp_us"] == pytest.approx(comp, rel=1e-9, abs=1e-3), (row, comp)
    # every step's allreduce is DDP's: some of it inside the compute span (the
    # bucket's allreduce starts in backward)
    assert any(r["comm_us"] > 0 for v in table.values() for r in v), table
