"""The computations behind ``costmodel web``, each run in a worker process, so that no request can hold the
server: a computation is cut at its time limit, dropped when its client leaves, and held to a memory limit, and a
small queue in front of the workers refuses what it cannot hold.

A worker is a process of its own (started by :mod:`multiprocessing`'s fork server, which has imported the command
line once), running one command at a time and answering what it printed; it stays warm between requests, so a
repeated computation reuses its caches. A worker whose computation passed its time limit, whose client left, or
that ran out of memory is killed and replaced, which is the only way to stop Python code mid-computation; it leads
a process group of its own, so the processes a computation spreads over (a plan's layouts over every core) end
with it. The standard library's process pools cannot cancel one running call, so this small pool is written here.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from costmodel.core.errors import CostModelError
from costmodel.web.fields import Job

#: How often a waiting request looks at its worker, its turn and its client (seconds).
POLL_S = 0.01
#: What a computation past its address space prints: Python's MemoryError, a library whose shared object could
#: not be mapped (an import the limit stopped), or a C function whose allocation the limit refused without setting
#: MemoryError, which CPython reports as a SystemError (about one run in three of the memory test here).
OUT_OF_MEMORY = ("MemoryError", "failed to map segment", "returned NULL without setting an exception")
#: The shortest gap between two progress messages of one computation (seconds).
PROGRESS_S = 0.1


@dataclass(frozen=True)
class Limits:
    """What one server gives its requests: ``workers`` computations at once, ``queue`` more waiting (past that a
    request is refused with 503), each cut after ``seconds`` and held to ``memory_bytes`` of address space
    beyond what a worker holds at its start, and an answer of at most ``answer_bytes``."""

    workers: int = 2
    queue: int = 8
    seconds: float = 120.0
    memory_bytes: int = 4 << 30
    answer_bytes: int = 16 << 20


class Busy(CostModelError):
    """Every worker is busy and the queue is full."""


class OverLimit(CostModelError):
    """A computation passed one of its :class:`Limits`; the message names it."""


def _limit_memory(extra: int) -> None:
    """Hold this process's address space to what it holds now plus ``extra`` bytes (Linux; elsewhere the limit
    is not enforced by the system and is left unset)."""
    try:
        import resource

        with open("/proc/self/statm") as f:
            now = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (now + extra, resource.getrlimit(resource.RLIMIT_AS)[1]))
    except (ImportError, OSError, ValueError):
        pass


def _compute(cli, job: Job, answer_bytes: int) -> tuple[int | str, str]:
    """(exit code, what the command printed) for ``job``, or (``"memory"`` or ``"size"``, "") past a limit."""
    import contextlib

    from click.testing import CliRunner

    from costmodel.model.presets import pasted_config

    sys.argv = ["costmodel", *job.args]  # an internal error names the command that reproduces it
    with contextlib.ExitStack() as stack:
        if job.config is not None:
            stack.enter_context(pasted_config(job.config))
        try:
            result = CliRunner().invoke(cli, list(job.args))
        except MemoryError:
            return "memory", ""
    if (
        result.exit_code == 3
        and any(s in result.output for s in OUT_OF_MEMORY)
        or isinstance(result.exception, MemoryError)
    ):
        return "memory", ""
    if len(result.output) > answer_bytes:
        return "size", ""
    return result.exit_code, result.output


@dataclass(frozen=True)
class ViewJob:
    """A view the page asks for: a :class:`costmodel.web.requests.ViewRequest` as JSON, computed through the
    library (:func:`costmodel.web.views.compute`); the answer is the view as JSON."""

    request: str


def _view(conn, job: ViewJob, answer_bytes: int) -> tuple[int | str, str]:
    """(0, the view's JSON), (1, "Error: ...") or (``"memory"`` or ``"size"``, "") for ``job``; its progress is sent
    as ``("progress", (done, total, what))`` at most every :data:`PROGRESS_S` seconds, and at each end."""
    import json

    from costmodel.web.requests import ViewRequest
    from costmodel.web.views import compute

    last = [0.0]

    def progress(done: int, total: int, what: str) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_S or done in (0, total):
            last[0] = now
            conn.send(("progress", (done, total, what)))

    try:
        text = json.dumps(compute(ViewRequest.model_validate_json(job.request), progress), allow_nan=False)
    except MemoryError:
        return "memory", ""
    except ImportError as err:  # a library's shared object the address-space limit kept out
        if OUT_OF_MEMORY[1] in str(err):
            return "memory", ""
        raise
    except (CostModelError, ValueError) as err:
        return 1, f"Error: {err}\n"
    except Exception as err:  # a bug: said as one, and the worker serves on
        return 3, f"Error: internal error (a bug in costmodel, please report it with the view's request): {err!r}\n"
    return ("size", "") if len(text) > answer_bytes else (0, text)


def _serve(conn, cli: tuple[str, str], memory_bytes: int, answer_bytes: int) -> None:
    """A worker: computes each job it is sent (a command line's with the group ``cli``, its module and name, or a
    page's view) and sends back its answer, until the server closes the pipe."""
    import importlib

    if hasattr(os, "setpgrp"):  # a group of its own: stopping it stops the processes it computes with too
        os.setpgrp()
    group = getattr(importlib.import_module(cli[0]), cli[1])
    _limit_memory(memory_bytes)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        answer = _view(conn, job, answer_bytes) if isinstance(job, ViewJob) else _compute(group, job, answer_bytes)
        conn.send(("answer", answer))


class _Worker:
    def __init__(self, context, cli: tuple[str, str], limits: Limits):
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_serve,
            args=(child, cli, limits.memory_bytes, limits.answer_bytes),
            daemon=False,  # it may compute over every core (costmodel.core.parallel); WorkerPool ends it
            name="costmodel-web-worker",
        )
        self.process.start()
        child.close()

    def kill(self) -> None:
        """End the worker and every process it started (its process group)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (AttributeError, OSError):  # no process groups here, or it has ended
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class WorkerPool:
    """Workers that run the command-line group ``cli``'s commands, under :class:`Limits`; :meth:`run` is awaited by
    a request. A worker finds the group by its module and name (:func:`click.group` puts the group where its
    function was)."""

    def __init__(self, cli, limits: Limits = Limits()):
        self.limits = limits
        self._cli = (cli.callback.__module__, cli.callback.__name__)
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        self._context = multiprocessing.get_context(method)
        if method == "forkserver":  # each worker starts with the command line imported
            self._context.set_forkserver_preload([self._cli[0], __name__, "click.testing", "costmodel.web.warm"])
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._waiting: collections.deque = collections.deque()
        self._running = 0
        self._started: list[_Worker] = []
        #: Computations stopped before their end (past their time limit, or their client gone).
        self.cut = 0
        atexit.register(self.close)  # before multiprocessing's own exit, which would wait for the workers

    @property
    def busy(self) -> int:
        """Computations running now."""
        return self._running

    @property
    def alive(self) -> int:
        """Worker processes alive now."""
        with self._lock:
            return sum(w.process.is_alive() for w in self._started)

    def _start(self) -> _Worker:
        worker = _Worker(self._context, self._cli, self.limits)
        with self._lock:
            self._started.append(worker)
        return worker

    def warm(self) -> None:
        """Start the workers now rather than at the first requests (blocking: call it off the event loop)."""
        started = [self._start() for _ in range(self.limits.workers - len(self._idle))]
        with self._lock:
            self._idle += started

    def close(self) -> None:
        """End every worker, busy ones too (their requests then fail)."""
        with self._lock:
            started, self._idle = list(self._started), []
        for worker in started:
            self._discard(worker)

    def _discard(self, worker: _Worker) -> None:
        """End ``worker``'s process and forget it (the only way to stop a computation mid-way)."""
        worker.kill()
        with self._lock:
            if worker in self._started:
                self._started.remove(worker)

    async def run(
        self, job: Job | ViewJob, gone: Callable[[], Awaitable[bool]], progress=None
    ) -> tuple[int, str] | None:
        """(exit code, printed text) of ``job`` in a worker, or None when ``gone()`` says the client left first
        (``progress(done, total, what)``: told of a view's steps). :class:`Busy` when the queue is full;
        :class:`OverLimit` when the computation passes a limit."""
        ticket = self._enter()
        worker, started = None, False
        try:
            while not (started := self._turn(ticket)):
                if await gone():
                    return None
                await asyncio.sleep(POLL_S)
            worker = await self._worker()
            worker.conn.send(job)
            deadline = time.monotonic() + self.limits.seconds
            while (message := self._message(worker)) is None or message[0] == "progress":
                if message is not None:
                    if progress is not None:
                        progress(*message[1])
                    continue
                if time.monotonic() > deadline:
                    self.cut += 1
                    raise OverLimit(
                        f"the computation passed the server's time limit of {self.limits.seconds:g} s "
                        "(costmodel web --time-limit)"
                    )
                if await gone():
                    self.cut += 1
                    return None
                await asyncio.sleep(POLL_S)
            code, text = message[1]
            if code != "memory":  # a worker out of memory (or ended) is replaced; any other serves on
                with self._lock:
                    self._idle.append(worker)
                worker = None
            if code in ("memory", "size"):
                raise OverLimit(self._over(code))
            return code, text
        finally:
            if worker is not None:  # cut, left or broken
                self._discard(worker)
            self._leave(ticket, started)

    @staticmethod
    def _message(worker: _Worker) -> tuple[str, tuple] | None:
        """``worker``'s next message (``("progress", ...)`` or ``("answer", (code, text))``), or None while it has
        none; :class:`Busy` when the server closed it meanwhile."""
        try:
            if not worker.conn.poll():
                return None
        except OSError:  # closed by close(): the server is stopping
            raise Busy("the server is stopping; try again shortly") from None
        try:
            return worker.conn.recv()
        except (EOFError, OSError):  # the process ended: killed by the system, most likely for memory
            return "answer", ("memory", "")

    def _over(self, code: str) -> str:
        if code == "memory":
            return (
                f"the computation ran out of memory (a worker may use {self.limits.memory_bytes >> 20:,} MiB; "
                "costmodel web --memory-limit)"
            )
        return f"the answer is larger than {self.limits.answer_bytes >> 20} MiB; ask for fewer points or devices"

    def _enter(self) -> object:
        with self._lock:
            if self._running + len(self._waiting) >= self.limits.workers + self.limits.queue:
                raise Busy(
                    f"the server is busy: {self._running} computations running and {len(self._waiting)} "
                    f"waiting, its most (costmodel web --workers, --queue); try again shortly"
                )
            ticket = object()
            self._waiting.append(ticket)
            return ticket

    def _turn(self, ticket) -> bool:
        """Whether ``ticket`` may start now (first in line, and a worker free); if so, it is running."""
        with self._lock:
            if self._waiting[0] is not ticket or self._running >= self.limits.workers:
                return False
            self._waiting.popleft()
            self._running += 1
            return True

    def _leave(self, ticket, started: bool) -> None:
        with self._lock:
            if started:
                self._running -= 1
            else:
                self._waiting.remove(ticket)

    async def _worker(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.process.is_alive():
                    return worker
                self._started.remove(worker)
                worker.kill()
        return await asyncio.get_running_loop().run_in_executor(None, self._start)
