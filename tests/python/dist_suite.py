"""PyTorch's own distributed test suite on the backend "zcc".

The suite is DistributedTest in torch/testing/_internal/distributed/
distributed_test.py, shipped with torch. It is enabled here as upstream's
test/distributed/test_distributed_spawn.py enables a backend (a test class
of TestDistBackend and DistributedTest._DistTestBase whose setUp spawns the
ranks), with "zcc" added to the suite's feature sets (DistTestCases.
backend_feature) for what zcc does: "plugin" (a third-party backend), "ddp",
"subgroup", "gpu" and "cuda". No test body, decorator or assertion is
changed; what zcc cannot do the suite skips or fails as it would for any
backend.

Environment, read when torch's suite is imported (this module sets the
defaults): BACKEND ("zcc"; "gloo" runs the same tests on gloo, to compare), WORLD_SIZE (default 2), TEMP_DIR (a new
temporary directory), ZCC_SUITE_FEATURES (a comma-separated subset of the
feature sets above; default all), ZCC_SUITE_START (fork, the default, or
spawn: see START). Run it with pytest, which prints every skip's reason
with -rs:

    WORLD_SIZE=3 python3 -m pytest -q -rs tests/python/dist_suite.py
    scripts/torch_suite.sh        # 2 and 3 ranks, then the subgroup tests at 8
"""
import atexit
import os
import shutil
import sys
import tempfile

FEATURES = ("plugin", "ddp", "subgroup", "gpu", "cuda")

BACKEND = os.environ.setdefault("BACKEND", "zcc")
if BACKEND not in ("zcc", "gloo"):
    raise RuntimeError("dist_suite.py runs torch's suite on backend 'zcc' (or 'gloo', "
                       "to compare); BACKEND=%s" % BACKEND)
os.environ.setdefault("WORLD_SIZE", "2")
if not os.environ.get("TEMP_DIR"):
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="zcc-dist-suite-")
    _owner = os.getpid()
    # The ranks inherit TEMP_DIR; only this process removes it.
    atexit.register(lambda: os.getpid() == _owner and
                    shutil.rmtree(os.environ["TEMP_DIR"], ignore_errors=True))

_here = os.path.dirname(os.path.abspath(__file__))
_python = os.path.join(os.path.dirname(os.path.dirname(_here)), "python")
if _python not in sys.path:
    sys.path.insert(0, _python)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import zcc.torch  # noqa: E402,F401  registers the backend, also in the spawned ranks

from torch.testing._internal import common_distributed  # noqa: E402

_features = [f for f in os.environ.get("ZCC_SUITE_FEATURES", ",".join(FEATURES)).split(",") if f]
for _f in _features:
    if _f not in FEATURES:
        raise RuntimeError("ZCC_SUITE_FEATURES: %r is not one of %s" % (_f, ", ".join(FEATURES)))
    if BACKEND == "zcc":
        common_distributed.DistTestCases.backend_feature[_f].add("zcc")

from torch.testing._internal.distributed import distributed_test  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False


# How the ranks of each test start: "spawn" as upstream's launcher (a fresh
# interpreter that imports torch: seconds per rank and test on a small
# machine), or "fork" (MultiProcessTestCase._start_processes with a fork
# context, as upstream's fork launcher had: the ranks inherit the imported
# torch). Either runs the same tests; the parent never makes a zcc
# communicator, so nothing of zcc's is forked.
START = os.environ.get("ZCC_SUITE_START", "fork")
if START not in ("fork", "spawn"):
    raise RuntimeError("ZCC_SUITE_START=%s: expected fork or spawn" % START)


class TestDistBackendWithSpawn(distributed_test.TestDistBackend,
                               distributed_test.DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if START == "spawn":
            self._spawn_processes()
        else:
            self._start_processes(torch.multiprocessing.get_context("fork").Process)


if __name__ == "__main__":
    from torch.testing._internal.common_utils import run_tests
    run_tests()
