"""Error cases: clear exceptions, raised on every rank, with nothing hung."""


def test_wrong_dtype(pool2):
    for r, res in enumerate(pool2.run("err_dtype")):
        bool_err, complex_err, int16_err, band_err, xor_err, out_err, ok = res
        assert bool_err[0] == "TypeError" and "torch.bool is not supported" in bool_err[1]
        assert "float32" in bool_err[1]  # names what is supported
        assert complex_err[0] == "TypeError" and "complex64" in complex_err[1]
        assert int16_err[0] == "TypeError" and "int16" in int16_err[1]
        assert band_err[0] == "ValueError" and "BAND" in band_err[1]
        assert xor_err[0] == "ValueError" and "not supported" in xor_err[1]
        assert out_err[0] == "TypeError" and "float64" in out_err[1]
        assert ok is True


def test_noncontiguous(pool2):
    for res in pool2.run("err_noncontiguous"):
        for err in res:
            assert err is not None and err[0] == "ValueError", err
            assert "not contiguous" in err[1] and "contiguous()" in err[1]


def test_mismatched_shapes(pool2):
    for res in pool2.run("err_shapes"):
        for i, err in enumerate(res):
            assert err is not None, "case %d raised nothing" % i
            assert err[0] in ("ValueError", "TypeError", "RuntimeError"), err
        agt, ag_count, ag_numel, rs, out, a2a_split, a2a_eq = res
        assert "9 elements" in agt[1] or "elements" in agt[1]
        assert "one per rank" in ag_count[1]
        assert "3 elements" in ag_numel[1]
        assert "expected 2 ranks x 4" in rs[1]
        assert "5 elements" in out[1]
        assert "split sizes" in a2a_split[1]
        assert "equal blocks" in a2a_eq[1]


def test_zcc_errors_carry_last_error(pool2):
    for r, (bcast, reduce_, destroyed, self_send) in enumerate(pool2.run("err_zcc")):
        assert bcast[0] == "ZccError"
        assert "zccBroadcast" in bcast[1] and "root 5 is out of range [0, 2)" in bcast[1]
        result, name, function, message = reduce_
        assert (result, name, function) == (4, "zccInvalidArgument", "zccReduce")
        assert "root -1" in message
        assert destroyed[0] == "ZccError" and "destroyed" in destroyed[1]
        assert self_send[0] == "ZccError" and "inside a group" in self_send[1]
    # the pool is still usable after all of these
    assert pool2.run("dist_broadcast", "float32", 4, 0)[1].tolist() == \
        __import__("cases").make(0, 4, "float32").tolist()


def test_uninitialised_backend(pool2):
    out = pool2.run("err_uninitialised")[0]
    # torch 1.13 raises RuntimeError, torch 2.x ValueError
    assert ("RuntimeError" in out or "ValueError" in out), out
    assert "not been initialized" in out, out


def test_library_search(tmp_path, monkeypatch):
    """ZCC_LIBRARY naming a missing file is an error, not a silent fallback."""
    import subprocess
    import sys
    import workers
    env = dict(__import__("os").environ, ZCC_LIBRARY=str(tmp_path / "nope.so"),
               PYTHONPATH=workers.PYTHON_DIR)
    p = subprocess.run([sys.executable, "-c", "import zcc"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0 and "ZCC_LIBRARY=" in p.stderr and "does not exist" in p.stderr
