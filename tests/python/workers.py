"""A pool of rank processes that pytest drives.

Starting torch in a process takes seconds on a small machine, so each world
size gets one pool of processes for the whole session: every rank joins
torch.distributed with the "zcc" backend once, and then runs the functions
of cases.py that the tests name, one call per test, all ranks at once. A
call returns, for every rank, ("ok", value) or ("err", exception type name,
message, traceback).
"""
import multiprocessing
import os
import socket
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON_DIR = os.path.join(REPO, "python")


def free_port():
    """A port free now, for ZCC_COMM_ID: zcc's bootstrap root binds it with
    SO_REUSEADDR at once. For a torch store use store_server()."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def store_server():
    """A TCPStore served by this process on a port the kernel picked and
    keeps (its .port): rank processes connect to it as clients. A port found
    free and let go before rank 0 listens on it can be taken meanwhile (seen
    in CI: EADDRINUSE at init_process_group)."""
    import torch.distributed as dist
    return dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)


def _worker(rank, size, port, conn, env=None):
    # The pool's environment (ZCC_* variables), before zcc and torch load.
    os.environ.update(env or {})
    for p in (PYTHON_DIR, HERE):
        if p not in sys.path:
            sys.path.insert(0, p)
    try:
        import torch
        torch.set_num_threads(1)
        import cases
        ctx = cases.setup(rank, size, port)
    except BaseException as e:  # report start-up failures to the parent
        conn.send(("err", type(e).__name__, str(e), traceback.format_exc()))
        return
    conn.send(("ok", None))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            break
        name, args = msg
        try:
            conn.send(("ok", getattr(cases, name)(ctx, *args)))
        except BaseException as e:
            conn.send(("err", type(e).__name__, str(e), traceback.format_exc()))
    try:
        cases.teardown(ctx)
    except BaseException:
        pass


class PoolError(AssertionError):
    pass


class Pool:
    def __init__(self, size, timeout=120, env=None):
        """size rank processes; env: variables set in each of them (on top
        of this process's environment) before they import torch and zcc."""
        self.size = size
        self.env = dict(env or {})
        self.timeout = timeout
        mpctx = multiprocessing.get_context("spawn")
        self.server = store_server()
        port = self.server.port
        self.conns, self.procs = [], []
        for r in range(size):
            parent, child = mpctx.Pipe()
            p = mpctx.Process(target=_worker, args=(r, size, port, child, self.env), daemon=True)
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)
        started = self._collect("start-up")
        bad = [r for r in started if r[0] != "ok"]
        if bad:
            self.close()
            raise PoolError("rank processes failed to start:\n" + bad[0][3])

    def _collect(self, what):
        out = []
        for rank, c in enumerate(self.conns):
            if not c.poll(self.timeout):
                self.kill()
                raise PoolError("rank %d gave no answer to %s within %ds (hang?)"
                                % (rank, what, self.timeout))
            try:
                out.append(c.recv())
            except EOFError:
                self.kill()
                raise PoolError("rank %d died during %s" % (rank, what))
        return out

    def call(self, name, *args):
        """Run cases.<name>(ctx, *args) on every rank: per-rank replies."""
        if not self.procs:
            raise PoolError("the pool was closed after an earlier failure")
        for c in self.conns:
            c.send((name, args))
        return self._collect(name)

    def run(self, name, *args):
        """As call, but raise if any rank failed; per-rank values."""
        replies = self.call(name, *args)
        for rank, r in enumerate(replies):
            if r[0] != "ok":
                raise PoolError("%s failed on rank %d of %d: %s: %s\n%s"
                                % (name, rank, self.size, r[1], r[2], r[3]))
        return [r[1] for r in replies]

    def kill(self):
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(5)
        self.procs = []

    def close(self):
        for c in self.conns:
            try:
                c.send(None)
            except (OSError, BrokenPipeError):
                pass
        for p in self.procs:
            p.join(20)
        self.kill()
        self.server = None
