"""Session-wide pools of rank processes, 2 and 4 ranks (see workers.py)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import workers  # noqa: E402

_pools = {}


def get_pool(size):
    pool = _pools.get(size)
    if pool is None or not pool.procs:
        pool = _pools[size] = workers.Pool(size)
    return pool


@pytest.fixture(scope="session", params=[2, 4], ids=["np2", "np4"])
def pool(request):
    return get_pool(request.param)


@pytest.fixture(scope="session")
def pool2():
    return get_pool(2)


def pytest_sessionfinish(session, exitstatus):
    for p in _pools.values():
        p.close()
