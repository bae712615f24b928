"""A search's time limit (``--time-limit``): past it a search takes no new work and answers with what it has,
labelled as stopped, so that a slow answer is never mistaken for a hung one."""

from __future__ import annotations

import time

#: Seconds a search may take unless told otherwise: generous (every shipped benchmark finishes well within it).
DEFAULT_S = 600.0


class Deadline:
    """``seconds`` from now (None: never). :meth:`passed` says whether it has; :meth:`stop` records what was left
    out when it did, which the answer then states (:attr:`stopped`)."""

    def __init__(self, seconds: float | None = None):
        self.seconds = seconds
        self.end = None if seconds is None else time.monotonic() + seconds
        self.stopped: str | None = None

    def passed(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end

    def stop(self, done: int, total: int, what: str, answer: str = "the best found so far") -> None:
        """Note that the search stopped with ``done`` of ``total`` ``what`` searched, its ``answer`` what it had."""
        self.stopped = (
            f"stopped at the time limit ({self.seconds:g} s) with {done} of {total} {what} searched: "
            f"{answer}, not the search's whole answer"
        )


def limited(seconds) -> Deadline:
    """A Deadline of ``seconds`` (a positive number, or None for none), checked."""
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0):
        from costmodel.core.errors import CostModelError

        raise CostModelError(f"time_limit must be a number of seconds (0 or more), got {seconds!r}"[:120])
    return Deadline(seconds)
