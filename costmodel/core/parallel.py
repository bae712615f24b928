"""Independent pieces of work over every core: deployments of a validation, points of a load curve.

Python's own process pool (:mod:`concurrent.futures`), forked where the platform allows (the work's tables,
built before, come along without being pickled); in this process when one worker is asked for or the caller
is itself a daemon process, which may not start processes of its own.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence


def workers_for(tasks: int, per_worker: int = 1, workers: int | None = None) -> int:
    """How many processes ``tasks`` pieces of work get: ``workers``, or every core, but at least ``per_worker``
    pieces each, and one inside a daemon process."""
    if multiprocessing.current_process().daemon:
        return 1
    return max(1, min(workers or os.cpu_count() or 1, tasks // per_worker or 1))


def run_all(
    fn: Callable, tasks: Sequence, workers: int, done=lambda result: None, costliest=None, deadline=None
) -> list:
    """``[fn(t) for t in tasks]`` over ``workers`` processes, calling ``done(result)`` as each comes.
    ``costliest(t)``: a sort key that starts the longest first, so that no process is left with them at the
    end; the results come back in the tasks' order. ``deadline`` (:class:`costmodel.core.deadline.Deadline`): once
    it has passed no task is started (those running finish); a task not run answers None, and the deadline notes
    how many were."""
    order = sorted(range(len(tasks)), key=lambda i: costliest(tasks[i])) if costliest else list(range(len(tasks)))
    results: list = [None] * len(tasks)
    ran = 0
    if workers <= 1:
        for i in order:
            if ran and deadline is not None and deadline.passed():
                break
            results[i] = fn(tasks[i])
            ran += 1
            done(results[i])
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
            futures = {pool.submit(fn, tasks[i]): i for i in order}
            for f in as_completed(futures):
                results[futures[f]] = f.result()
                ran += 1
                done(results[futures[f]])
                if deadline is not None and deadline.passed():
                    for g in futures:
                        g.cancel()
                    break
        for f, i in futures.items():  # those running when the deadline passed
            if results[i] is None and f.done() and not f.cancelled():
                results[i] = f.result()
                ran += 1
    if ran < len(tasks) and deadline is not None:
        deadline.stop(ran, len(tasks), "pieces of work")
    return results
