"""An engine under load, iteration by iteration (continuous batching).

Each iteration the scheduler runs, in this order: one decode token for every running sequence whose prompt is
done; the next chunk of every running prompt not yet done; then waiting requests, oldest first, while the
sequence limit, the token budget and the KV pages allow. A prompt longer than what is left of the budget is
split when the engine chunks prefills, and waits otherwise. An engine that does not mix (SGLang's default)
runs an iteration of prompts alone whenever a prompt is waiting and can be admitted, and decode iterations
otherwise.

KV pages are taken as tokens are cached. An engine that reserves (TensorRT-LLM's no-evict scheduler) admits a
request only with pages for its prompt and whole output; the others take pages as they go and, when a decode
token finds no free page, preempt the most recently admitted running request: its pages are freed and it goes
back to the head of the queue; an iteration that preempted admits nothing new. Without prefix caching a
preempted request is recomputed when it returns (its prompt and the tokens it has produced prefilled again);
with it (vLLM's default) its KV is still in the pages it freed and only its last token is computed again.

The iteration's time is :class:`costmodel.engine.iteration.IterationTable`'s for its mix, plus the engine's fixed cost
per iteration and the host's time where one is fitted (:meth:`costmodel.engine.served.Setup.wall`). A prompt's last
chunk produces the request's first token at the end of that iteration (TTFT counts from the request's arrival),
every decode iteration one token per sequence. Load is a closed loop
(``concurrency`` clients each sending a new request when their last one finishes; all start at time 0, as
benchmark clients do) or an open one (Poisson arrivals at ``request_rate``).

Under attention data parallel one group is simulated; the routed experts it shares with the others see their
tokens too, taken as copies of this group in the mean (as many running sequences, each decoding a token and
prefilling a prompt's worth per output token).

Stretches of decode-only iterations with nothing to admit are advanced at once (their step times evaluated as an
array), which keeps 1,000 requests well under a second.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from costmodel.core.errors import CostModelError
from costmodel.engine.config import EngineConfig
from costmodel.engine.iteration import IterationTable


@dataclass
class _Request:
    i: int
    arrival: float
    prompt: int
    output: int
    target: int = 0  # tokens to prefill: the prompt, or prompt + produced tokens after a preemption
    done: int = 0  # of target prefilled
    produced: int = 0
    first: float = -1.0
    finish: float = -1.0
    pages: int = 0
    admitted_at: int = -1


@dataclass
class SimResult:
    """Per-request times and per-iteration facts of one simulated run."""

    arrival: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    output: np.ndarray
    iterations: int
    prefill_iterations: int
    iteration_s: list = field(default_factory=list)  # (duration, decode tokens) of each stretch
    batch_tokens_max: int = 0
    seqs_max: int = 0
    kv_pages_max: int = 0
    kv_pages: int = 0
    preemptions: int = 0
    prefill_tokens: int = 0  # tokens prefilled, prompts and returns of preempted requests alike
    recomputed_tokens: int = 0  # of those, tokens whose KV a preemption lost and that were computed again
    resumed: int = 0  # preempted requests that had their first token (each returns with one token to compute)
    prefill_s: float = 0.0
    decode_s: float = 0.0
    comm_s: float = 0.0
    overhead_s: float = 0.0
    seq_iterations: float = 0.0  # sum over iterations of running sequences (mean batch = this / iterations)
    violations: list = field(default_factory=list)

    def after(self, warmup: int) -> SimResult:
        """The same run with its first ``warmup`` requests left out of the per-request times."""
        kept = slice(warmup, None)
        return dataclasses.replace(
            self, arrival=self.arrival[kept], first=self.first[kept], finish=self.finish[kept], output=self.output[kept]
        )

    def record(self, times: np.ndarray, decode: int, running: int, tokens: int, kv_used: int) -> None:
        """Iterations of ``times`` seconds, each with ``decode`` decode tokens, ``running`` sequences and
        ``tokens`` tokens in all, ``kv_used`` pages taken after them."""
        self.iterations += len(times)
        self.seq_iterations += len(times) * running
        self.iteration_s.append((times, decode))
        self.batch_tokens_max = max(self.batch_tokens_max, tokens)
        self.seqs_max = max(self.seqs_max, running)
        self.kv_pages_max = max(self.kv_pages_max, kv_used)

    @property
    def ttft(self) -> np.ndarray:
        return self.first - self.arrival

    @property
    def tpot(self) -> np.ndarray:
        more = self.output > 1
        return (self.finish[more] - self.first[more]) / (self.output[more] - 1)

    @property
    def e2e(self) -> np.ndarray:
        return self.finish - self.arrival


def client_queue(res: SimResult, clients: int) -> SimResult:
    """``res`` (a closed loop of as many requests in flight as the benchmark client has connections) as
    ``clients`` clients see it: the first ``clients`` requests are sent at time 0 and each later one when its
    client's last request finishes; a request waits in the client for a connection (the finish of an earlier
    request frees one) with its clock running, so its arrival is when it was sent, not when the engine got it.
    Request n (in the order the engine got them) was sent at the (n - clients)-th finish."""
    order = np.argsort(res.arrival, kind="stable")
    done = np.sort(res.finish)
    sent = np.zeros(len(order))
    later = np.arange(clients, len(order))
    sent[later] = done[later - clients]
    arrival = np.empty_like(res.arrival, dtype=float)
    arrival[order] = sent
    return dataclasses.replace(res, arrival=arrival)


def arrival_times(n: int, request_rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """When an open loop's ``n`` requests are sent, as vLLM's ``bench serve`` sends them
    (vllm/benchmarks/serve.py ``get_request``): gaps drawn from a gamma distribution of shape ``burstiness`` and
    mean ``1 / request_rate`` (1: Poisson arrivals; below 1 burstier, above 1 more even; infinite: evenly spaced),
    summed, then scaled so that the last request goes at ``n / request_rate`` (its "normalize_factor": the
    rate is the asked one whatever the draw)."""
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / request_rate)
    else:
        gaps = np.random.default_rng(seed).gamma(burstiness, 1.0 / (request_rate * burstiness), n)
    t = np.cumsum(gaps)
    return t * (n / request_rate / t[-1])


def simulate(
    table: IterationTable,
    eng: EngineConfig,
    *,
    kv_tokens: int,
    prompts: np.ndarray,
    outputs: np.ndarray,
    concurrency: int | None = None,
    request_rate: float | None = None,
    burstiness: float = 1.0,
    overhead_s: float = 0.0,
    seed: int = 0,
    check: bool = False,
    wall=None,
) -> SimResult:
    """Run ``len(prompts)`` requests through the engine. ``check``: record every violated invariant (token
    budget, sequence limit, KV pages) instead of trusting them. ``wall(gpu, sequences)``: an iteration's time
    from its GPU work and its running sequences (:meth:`costmodel.engine.served.Setup.wall`); by default the work plus
    ``overhead_s``."""
    if wall is None:

        def wall(gpu, sequences):
            return gpu + overhead_s

    n = len(prompts)
    ratio = float(np.mean(prompts)) / max(float(np.mean(outputs)), 1.0)  # prompt tokens per output token
    if (concurrency is None) == (request_rate is None):
        raise CostModelError("give a concurrency or a request rate, not both")
    pages_total = kv_tokens // eng.page_size
    page = eng.page_size
    budget, seq_limit = eng.max_num_batched_tokens, eng.max_num_seqs
    need_whole = int(max(prompts)) + (int(max(outputs)) if eng.reserve_output else 1)
    if _pages(need_whole, page) > pages_total:
        raise CostModelError(
            f"one request of {need_whole} tokens needs {_pages(need_whole, page)} KV pages; the "
            f"engine has {pages_total:,} ({kv_tokens:,} tokens) on this device"
        )
    if not eng.chunked_prefill and int(max(prompts)) > budget:
        raise CostModelError(
            f"a prompt of {int(max(prompts))} tokens exceeds the token budget {budget} and chunked prefill is off"
        )
    reqs = [_Request(i, 0.0, int(p), int(o)) for i, (p, o) in enumerate(zip(prompts, outputs))]
    for r in reqs:
        r.target = r.prompt
    pending: list[tuple[float, int]] = []  # (arrival, request) of requests not yet in the queue
    if request_rate is not None:
        for r, a in zip(reqs, arrival_times(n, request_rate, burstiness, seed)):
            r.arrival = float(a)
            pending.append((r.arrival, r.i))
        heapq.heapify(pending)
    issued = min(concurrency, n) if concurrency is not None else n
    if concurrency is not None:
        for r in reqs[:issued]:
            heapq.heappush(pending, (0.0, r.i))
    waiting: deque[_Request] = deque()
    running: list[_Request] = []
    free = pages_total
    clock = 0.0
    finished = 0
    res = SimResult(np.zeros(n), np.zeros(n), np.zeros(n), np.array(outputs, float), 0, 0, kv_pages=pages_total)
    admitted = 0
    # when the iteration about to run was scheduled: its own start, or under an overlap scheduler the start of
    # the iteration before it (None: the engine was idle, and schedules as a request comes)
    last_start: float | None = None
    lag = eng.lag

    def finish(r: _Request) -> None:
        nonlocal free, finished, issued
        r.finish = clock
        free += r.pages
        r.pages = 0
        finished += 1
        if concurrency is not None and issued < n:
            nxt = reqs[issued]
            nxt.arrival = clock
            heapq.heappush(pending, (clock, nxt.i))
            issued += 1

    while finished < n:
        seen = last_start if (lag and last_start is not None) else clock  # the scheduling point
        while pending and pending[0][0] <= seen:
            waiting.append(reqs[heapq.heappop(pending)[1]])
        if not running and not waiting:
            clock = max(clock, pending[0][0])
            last_start = None
            continue
        decoding = [r for r in running if r.done == r.target]
        prefilling = [r for r in running if r.done < r.target]
        # a decode token that opens a new page takes one; preempt the newest running request when none is free
        preempted = False
        if not eng.reserve_output:
            while True:
                need = sum(1 for r in decoding if r.prompt + r.produced >= r.pages * page)
                if need <= free or not running:
                    break
                victim = max(running, key=lambda r: r.admitted_at)
                running.remove(victim)
                free += victim.pages
                victim.pages = 0
                # a decoding request returns to compute its last token and carry on; under prefix caching its KV
                # is found in the pages it freed, otherwise everything it had cached is computed again
                if victim.done == victim.target:
                    res.resumed += 1
                    victim.target = victim.prompt + victim.produced
                    victim.done = victim.target - 1
                if not eng.prefix_caching:
                    res.recomputed_tokens += victim.done
                    victim.done = 0
                waiting.appendleft(victim)
                res.preemptions += 1
                preempted = True
                decoding = [r for r in running if r.done == r.target]
                prefilling = [r for r in running if r.done < r.target]
        # an iteration that preempted admits nothing new (vLLM v1/core/sched/scheduler.py: waiting requests are
        # scheduled only when no running one was preempted), so the freed pages first serve the running requests;
        # with nothing left running, the queue's head may start
        preempted = preempted and bool(running)
        # decode-only stretch: nothing to prefill, and nothing can be admitted before a request finishes
        can_admit = (
            not preempted
            and bool(waiting)
            and len(running) < seq_limit
            and _admission(waiting[0], eng, free, page, budget - (len(decoding) if eng.mixes else 0)) is not None
        )
        if decoding and not prefilling and not can_admit and not preempted:
            steps = min(r.output - r.produced for r in decoding)
            if not eng.reserve_output:
                steps = _page_steps(decoding, free, page, steps)
            if steps >= 1:
                d = len(decoding)
                ctx = sum(r.prompt + r.produced for r in decoding)
                others = table.others_for(len(running), ratio)
                gpu = table.decode_run(d, ctx, steps, others)
                times = wall(gpu, d)
                if pending:  # stop before the first iteration scheduled after the next arrival
                    ends = clock + np.cumsum(times)
                    planned = ends - times if lag else ends  # when each iteration's successor is scheduled
                    steps = min(steps, int(np.searchsorted(planned, pending[0][0])) + 1)
                    times, gpu = times[:steps], gpu[:steps]
                for r in decoding:
                    grown = _pages(r.prompt + r.produced + steps, page)
                    if not eng.reserve_output:
                        free -= grown - r.pages
                        r.pages = grown
                    r.produced += steps
                comm = table.decode_comm(d, others) * steps  # the collectives of these steps
                last_start = clock + float(times[:-1].sum())
                clock += float(times.sum())
                res.decode_s += float(gpu.sum()) - comm
                res.comm_s += comm
                res.overhead_s += float(times.sum() - gpu.sum())
                res.record(times, d, d, d, pages_total - free)
                for r in [r for r in decoding if r.produced >= r.output]:
                    running.remove(r)
                    finish(r)
                continue
        # one iteration
        prefill_only = not eng.mixes and (can_admit or bool(prefilling))
        decode_now = [] if prefill_only else decoding
        room = budget - len(decode_now)
        chunks: list[tuple[int, int]] = []
        starting: list[tuple[_Request, int]] = []
        for r in decode_now:
            if not eng.reserve_output and r.prompt + r.produced >= r.pages * page:
                r.pages += 1
                free -= 1
        for r in prefilling:
            c = min(r.target - r.done, room)
            if not eng.reserve_output:  # no more than the free pages hold
                c = min(c, (r.pages + free) * page - r.done)
            if c <= 0 or (not eng.chunked_prefill and c < r.target - r.done):
                break
            extra = max(_pages(r.done + c, page) - r.pages, 0)
            r.pages += extra
            free -= extra
            chunks.append((r.done, c))
            starting.append((r, c))
            room -= c
        while waiting and len(running) < seq_limit and not preempted:
            r = waiting[0]
            admit = _admission(r, eng, free, page, room)
            if admit is None:
                break
            c, want = admit
            waiting.popleft()
            r.pages += want
            free -= want
            r.admitted_at = admitted
            admitted += 1
            running.append(r)
            chunks.append((r.done, c))
            starting.append((r, c))
            room -= c
        outputs_rows = sum(1 for r, c in starting if r.done + c == r.target)
        if not decode_now and not chunks:
            raise CostModelError(
                "the engine cannot schedule any request: raise the token budget, the sequence limit or the KV cache"
            )
        it = table.time(
            decode_seqs=len(decode_now),
            decode_context_sum=sum(r.prompt + r.produced for r in decode_now),
            chunks=chunks,
            outputs=len(decode_now) + outputs_rows,
            others=table.others_for(len(running), ratio),
        )
        dt = float(wall(it.total_s, len(running)))
        tokens = len(decode_now) + sum(c for _, c in chunks)
        res.prefill_tokens += tokens - len(decode_now)
        last_start = clock
        if check:
            if tokens > budget:
                res.violations.append(f"iteration {res.iterations}: {tokens} tokens > budget {budget}")
            if len(running) > seq_limit:
                res.violations.append(f"iteration {res.iterations}: {len(running)} sequences > {seq_limit}")
            if free < 0:
                res.violations.append(f"iteration {res.iterations}: KV pages overdrawn by {-free}")
        clock += dt
        res.prefill_s += it.prefill_s
        res.decode_s += it.decode_s
        res.comm_s += it.comm_s
        res.overhead_s += dt - it.total_s
        res.prefill_iterations += 1 if chunks else 0
        res.record(np.array([dt]), len(decode_now), len(running), tokens, pages_total - free)
        done_now = []
        for r in decode_now:
            r.produced += 1
            if r.produced >= r.output:
                done_now.append(r)
        for r, c in starting:
            r.done += c
            if r.done == r.target:
                if r.first < 0:
                    r.first = clock
                r.produced += 1
                if r.produced >= r.output:
                    done_now.append(r)
        for r in done_now:
            running.remove(r)
            finish(r)
    for r in reqs:
        res.arrival[r.i], res.first[r.i], res.finish[r.i] = r.arrival, r.first, r.finish
    return res


def _pages(tokens: int, page: int) -> int:
    """KV pages that hold ``tokens`` tokens."""
    return -(-tokens // page)


def _admission(r: _Request, eng: EngineConfig, free: int, page: int, room: int) -> tuple[int, int] | None:
    """(first chunk, pages to take) of a waiting request starting with ``room`` tokens of the budget left and
    ``free`` pages; None when it cannot start now."""
    if room <= 0:
        return None
    c = min(r.target - r.done, room)
    if not eng.chunked_prefill and c < r.target:
        return None
    want = _pages(r.prompt + r.output, page) if eng.reserve_output else _pages(r.done + c, page)
    return (c, want) if want <= free else None


def _page_steps(decoding: list[_Request], free: int, page: int, steps: int) -> int:
    """The most decode steps (at most ``steps``) whose new pages fit in ``free``."""

    def need(k: int) -> int:
        return sum(_pages(r.prompt + r.produced + k, page) - r.pages for r in decoding)

    if need(steps) <= free:
        return steps
    lo, hi = 0, steps
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need(mid) <= free:
            lo = mid
        else:
            hi = mid - 1
    return lo
