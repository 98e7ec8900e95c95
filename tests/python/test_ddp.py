"""examples/ddp_train.py: DDP over zcc, and zcc's hook, match gloo's losses."""
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
