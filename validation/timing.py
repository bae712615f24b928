"""Timing kernels the way the field does: warm-up, many repetitions, median and spread.

CPU: a fixed thread count, ``time.perf_counter`` around each call. CUDA, eager (``graph=False``): CUDA events
around each call, with the device synchronised, so the host's dispatch of the torch op is in the time. CUDA,
``graph=True``: the call is captured once in a CUDA graph and each repetition replays it between CUDA events
that the cache flush's kernel precedes, so the replay's launch is hidden behind the flush and the time is the
GPU's alone (what serving engines run, and the published tables' ``graph`` convention; they time without a
flush). Between repetitions a buffer twice the size of the last-level cache is
overwritten, so every repetition reads its operands from memory (the roofline's assumption), not from
a cache the previous repetition left warm. A full run makes :data:`PASSES` passes over its whole grid and
takes each op's median over them (:func:`merge`): a shared machine's slow spells last a minute or two, so
they land in one pass of a case and are outvoted by the others.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Timing:
    median_s: float
    p10_s: float
    p90_s: float
    reps: int
    method: str

    def to_dict(self) -> dict:
        return asdict(self)


class Timer:
    """Times callables on one device with a cache flush between repetitions."""

    def __init__(
        self,
        device: str,
        *,
        flush_bytes: int | None = None,
        warmup: int = 3,
        min_reps: int = 5,
        max_reps: int = 50,
        budget_s: float = 0.25,
        threads: int | None = None,
        graph: bool = False,
        wall_budget: bool = False,
    ):
        if graph and device != "cuda":
            raise ValueError(f"CUDA-graph timing needs a CUDA device, not {device}")
        self.device, self.graph = device, graph
        if flush_bytes is None:
            flush_bytes = flush_size(device)
        self.warmup, self.min_reps, self.max_reps, self.budget_s = warmup, min_reps, max_reps, budget_s
        # wall_budget: the budget bounds the repetitions' wall time, their cache flushes included (a quick run's: a
        # flush of 64 MiB takes milliseconds on a CPU, a small op a thousandth of that, and a budget of the ops' own
        # time runs every small op to max_reps); else it bounds the timed calls' own time
        self.wall_budget = wall_budget
        if device == "cpu":
            torch.set_num_threads(threads or torch.get_num_threads())
        self.threads = torch.get_num_threads()
        self.flush_buffer = torch.empty(flush_bytes // 4, dtype=torch.float32, device=device) if flush_bytes else None
        flush = f"{flush_bytes >> 20} MiB cache flush between repetitions" if flush_bytes else "no cache flush"
        clock = (
            "CUDA events around one CUDA-graph replay of the call, launched while the GPU runs the cache flush "
            f"and a {SPIN_CYCLES:,}-cycle spin"
            if graph
            else "CUDA events, device synchronised"
            if device == "cuda"
            else f"perf_counter, {self.threads} threads"
        )
        wall = " of wall time, flushes included" if wall_budget else ""
        self.method = (
            f"{clock}; {warmup} warm-up runs; {min_reps}-{max_reps} timed repetitions "
            f"(within about {budget_s:g} s{wall}); median, p10, p90; {flush}"
        )

    def _flush(self) -> None:
        if self.flush_buffer is not None:
            self.flush_buffer.fill_(1.0)

    @property
    def timing(self) -> str:
        """The convention of the times this timer takes (:data:`costmodel.core.vocab.Timing`)."""
        return "graph" if self.graph else "eager"

    def time(self, fn: Callable[[], object]) -> Timing:
        if self.graph:
            once = self._graph_replay(fn)
        else:
            for _ in range(self.warmup):
                fn()
            clock = self._cuda if self.device == "cuda" else self._cpu

            def once() -> float:
                self._flush()
                return clock(fn)

        times: list[float] = []
        start, spent = time.perf_counter(), 0.0
        while len(times) < self.min_reps or (len(times) < self.max_reps and spent < self.budget_s):
            times.append(once())
            spent = time.perf_counter() - start if self.wall_budget else spent + times[-1]
        return self._summary(times)

    def _graph_replay(self, fn: Callable[[], object]) -> Callable[[], float]:
        """Capture ``fn`` in a CUDA graph (after warm-up calls on a side stream, as capture requires) and return one
        timed repetition of it: flush the cache, record the start event, replay and record the end event without
        synchronising in between, so the GPU runs the replay straight after the flush's kernel."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(self.warmup, 1)):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        for _ in range(self.warmup):
            graph.replay()

        def once() -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            self._flush()
            torch.cuda._sleep(SPIN_CYCLES)  # the GPU stays busy while the host records and launches
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3

        return once

    def _summary(self, times: list[float]) -> Timing:
        times = sorted(times)
        q = statistics.quantiles(times, n=10, method="inclusive") if len(times) > 1 else [times[0]] * 9
        return Timing(statistics.median(times), q[0], q[-1], len(times), self.method)

    @staticmethod
    def _cpu(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    @staticmethod
    def _cuda(fn) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3


#: GPU clock cycles a graph replay's repetition spins after the cache flush and before its start event (about 50 µs
#: at 2 GHz; a graph launch takes the host 5-20 µs), so the replay never waits for the host.
SPIN_CYCLES = 100_000

#: The cache flush between repetitions when the device reports no cache size: larger than a CPU's L3 or a
#: GPU's L2 of its generation (an H100's L2 is 50 MB, an H200's 60 MB, a B200's 126 MB; torch reports it).
FLUSH_BYTES = 64 << 20


def flush_size(device: str) -> int:
    """Bytes overwritten between repetitions: twice the GPU's L2 as torch reports it (so that no operand
    of the last repetition survives in it), and at least :data:`FLUSH_BYTES`."""
    if device == "cuda":
        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
        return max(FLUSH_BYTES, 2 * l2)
    return FLUSH_BYTES


def environment(device: str, timer: Timer | None = None) -> dict:
    """What every result records: torch version, device name, backend and timing method."""
    if device == "cuda":
        name = torch.cuda.get_device_name()
        backend = f"CUDA {torch.version.cuda}"
    else:
        import platform

        name = _cpu_name() or platform.processor() or "cpu"
        backend = f"CPU ({torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} threads"
    out = {"torch_version": str(torch.__version__), "device": device, "device_name": str(name), "backend": backend}
    if timer is not None:
        out["timing_method"] = timer.method
    return out


def _cpu_name() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


#: A machine is called busy when its 1-minute load average before timing is at least this share of its
#: cores, or when the median p90/median spread of the timings is above SPREAD_LIMIT.
LOAD_SHARE = 0.5
SPREAD_LIMIT = 1.25


#: Read bandwidth now against the calibrated profile's beyond this factor either way: the machine changed.
DRIFT_LIMIT = 1.25


#: Passes over the whole grid (quick, full), in calibration and validation alike: each op's timing is the
#: median over its passes.
PASSES = {True: 1, False: 3}


def merge(timings: list[Timing]) -> Timing:
    """One timing from passes over the same kernel taken minutes apart: each statistic is the median over
    the passes, so a slow spell of a shared machine that spans one pass of three is outvoted (a mean, or
    the repetitions pooled, would carry it)."""
    if len(timings) == 1:
        return timings[0]
    med = lambda key: statistics.median(getattr(t, key) for t in timings)  # noqa: E731
    return Timing(
        med("median_s"),
        med("p10_s"),
        med("p90_s"),
        sum(t.reps for t in timings),
        f"{timings[0].method}; median over {len(timings)} passes interleaved over the whole grid",
    )


def noise_check(load_before: float | None, spreads: list[float], threads: int, drift: float | None = None) -> dict:
    """How quiet the machine was: the load average before timing, the spread of the timings, the speed
    drift since calibration (read bandwidth now / then), and a warning when any says the numbers are not
    to be trusted."""
    import os

    cores = os.cpu_count() or 1
    spread = statistics.median(spreads) if spreads else None
    reasons = []
    if load_before is not None and load_before >= max(LOAD_SHARE * cores, 0.5):
        reasons.append(f"load average {load_before:.2f} on {cores} cores before timing")
    if spread is not None and spread > SPREAD_LIMIT:
        reasons.append(f"median p90/median spread {spread:.2f} (above {SPREAD_LIMIT})")
    if drift is not None and not 1 / DRIFT_LIMIT <= drift <= DRIFT_LIMIT:
        reasons.append(f"read bandwidth {drift:.2f}x what it was at calibration")
    return {
        "load_average": load_before,
        "cores": cores,
        "threads": threads,
        "median_spread": None if spread is None else round(spread, 3),
        "speed_since_calibration": None if drift is None else round(drift, 3),
        "busy": bool(reasons),
        "warning": (
            "the machine was busy (" + "; ".join(reasons) + "): these timings are noise, not the "
            "device; rerun on a quiet machine"
        )
        if reasons
        else None,
    }
