"""Step and compute markers for zcc's trace (ZCC_TRACE_FILE), without torch.

    from zcc import trace
    for batch in loader:
        with trace.step():                   # one training step
            with trace.compute("forward"):   # time spent computing
                loss = model(batch)
            ...

``zcc_trace heatmap`` turns the markers and the collectives of the same
trace into the overlap ratio per step and rank. ``zcc.torch.step`` and
``zcc.torch.compute`` are the same context managers. With tracing off the
markers cost one C call each and write nothing.
"""
import contextlib
import itertools

from . import _lib

__all__ = ["step", "compute", "mark"]

_steps = itertools.count()


def mark(kind, name, begin):
    """zccTraceMark: open (begin=True) or close a span of `kind` named `name`."""
    _lib.check(_lib.zccTraceMark(kind.encode(), name.encode(), 1 if begin else 0),
               "zccTraceMark")


@contextlib.contextmanager
def _span(kind, name):
    mark(kind, name, True)
    try:
        yield
    finally:
        mark(kind, name, False)


def step(name=None):
    """A training step: ``with zcc.trace.step(): ...`` (named "step N" by default)."""
    return _span("step", name if name is not None else "step %d" % next(_steps))


def compute(name="compute"):
    """Computation inside a step: ``with zcc.trace.compute("backward"): ...``."""
    return _span("compute", name)
