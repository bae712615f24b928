"""Progress of long commands: a bar on a terminal (tqdm, on standard error), nothing on a pipe or a file, nothing
with ``costmodel --quiet`` (or ``COSTMODEL_QUIET=1``). The output a command prints is never touched."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

#: Set by ``costmodel --quiet``.
QUIET = False
#: Told of every step where set (:func:`listen`): ``(done, total, what)``; the page shows it.
_LISTENER = None


@contextmanager
def listen(callback):
    """Within the block, every bar's steps are also told to ``callback(done, total, what)`` (the page's progress;
    a computation in a worker of its own, so one listener at a time)."""
    global _LISTENER
    _LISTENER = callback
    try:
        yield
    finally:
        _LISTENER = None


def shown() -> bool:
    """Whether a bar would be seen: standard error is a terminal and nobody asked for quiet."""
    if QUIET or os.environ.get("COSTMODEL_QUIET", "").strip() not in ("", "0"):
        return False
    return hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


@contextmanager
def bar(total: int, what: str):
    """A callable ``advance(n=1)`` that moves a bar of ``total`` steps labelled ``what`` (a no-op where no bar is
    shown)."""
    if _LISTENER is not None:
        told, done = _LISTENER, [0]
        told(0, total, what)

        def advance(n=1):
            done[0] += n
            told(done[0], total, what)

        yield advance
        return
    if not shown():
        yield lambda n=1: None
        return
    from tqdm import tqdm

    with tqdm(
        total=total, desc=what, unit=" " + what.split()[-1], leave=False, file=sys.stderr, dynamic_ncols=True
    ) as t:
        yield t.update
