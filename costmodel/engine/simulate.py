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
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from costmodel.core.errors import CostModelError
from costmodel.engine.config import EngineConfig
from costmodel.engine.iteration import IterationTable
from costmodel.engine.load import arrival_times
from costmodel.engine.scheduler import Admission, newest


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

    if (concurrency is None) == (request_rate is None):
        raise CostModelError("give a concurrency or a request rate, not both")
    rule = Admission.of(eng)
    pages_total = kv_tokens // rule.page
    need_whole = int(max(prompts)) + (int(max(outputs)) if eng.reserve_output else 1)
    if rule.pages(need_whole) > pages_total:
        raise CostModelError(
            f"one request of {need_whole} tokens needs {rule.pages(need_whole)} KV pages; the "
            f"engine has {pages_total:,} ({kv_tokens:,} tokens) on this device"
        )
    if not eng.chunked_prefill and int(max(prompts)) > rule.budget:
        raise CostModelError(
            f"a prompt of {int(max(prompts))} tokens exceeds the token budget {rule.budget} and chunked prefill is off"
        )
    run = _Engine(table, eng, rule, pages_total, prompts, outputs, wall, check)
    run.load(concurrency, request_rate, burstiness, seed)
    return run.run()


class _Engine:
    """One engine's queue, running batch and KV pages as :func:`simulate` advances them."""

    def __init__(self, table, eng, rule: Admission, pages_total: int, prompts, outputs, wall, check: bool):
        self.table, self.eng, self.rule, self.wall, self.check = table, eng, rule, wall, check
        self.n = len(prompts)
        self.ratio = float(np.mean(prompts)) / max(float(np.mean(outputs)), 1.0)  # prompt tokens per output token
        self.reqs = [_Request(i, 0.0, int(p), int(o)) for i, (p, o) in enumerate(zip(prompts, outputs))]
        for r in self.reqs:
            r.target = r.prompt
        self.pending: list[tuple[float, int]] = []  # (arrival, request) of requests not yet in the queue
        self.waiting: deque[_Request] = deque()
        self.running: list[_Request] = []
        self.pages_total = self.free = pages_total
        self.clock = 0.0
        self.finished = self.admitted = 0
        self.closed_loop = False
        self.issued = self.n
        n = self.n
        self.res = SimResult(
            np.zeros(n), np.zeros(n), np.zeros(n), np.array(outputs, float), 0, 0, kv_pages=pages_total
        )
        # when the iteration about to run was scheduled: its own start, or under an overlap scheduler the start of
        # the iteration before it (None: the engine was idle, and schedules as a request comes)
        self.last_start: float | None = None

    def load(self, concurrency, request_rate, burstiness, seed) -> None:
        if request_rate is not None:
            for r, a in zip(self.reqs, arrival_times(self.n, request_rate, burstiness, seed)):
                r.arrival = float(a)
                self.pending.append((r.arrival, r.i))
            heapq.heapify(self.pending)
        if concurrency is not None:
            self.closed_loop = True
            self.issued = min(concurrency, self.n)
            for r in self.reqs[: self.issued]:
                heapq.heappush(self.pending, (0.0, r.i))

    def finish(self, r: _Request) -> None:
        r.finish = self.clock
        self.free += r.pages
        r.pages = 0
        self.finished += 1
        if self.closed_loop and self.issued < self.n:
            nxt = self.reqs[self.issued]
            nxt.arrival = self.clock
            heapq.heappush(self.pending, (self.clock, nxt.i))
            self.issued += 1

    def run(self) -> SimResult:
        while self.finished < self.n:
            seen = self.last_start if (self.eng.lag and self.last_start is not None) else self.clock
            while self.pending and self.pending[0][0] <= seen:
                self.waiting.append(self.reqs[heapq.heappop(self.pending)[1]])
            if not self.running and not self.waiting:
                self.clock = max(self.clock, self.pending[0][0])
                self.last_start = None
                continue
            preempted = False if self.eng.reserve_output else self.preempt()
            # an iteration that preempted admits nothing new (vLLM v1/core/sched/scheduler.py: waiting requests are
            # scheduled only when no running one was preempted), so the freed pages first serve the running
            # requests; with nothing left running, the queue's head may start
            preempted = preempted and bool(self.running)
            decoding = [r for r in self.running if r.done == r.target]
            prefilling = [r for r in self.running if r.done < r.target]
            can_admit = not preempted and self.can_admit(len(decoding) if self.eng.mixes else 0)
            # decode-only stretch: nothing to prefill, and nothing can be admitted before a request finishes
            if decoding and not prefilling and not can_admit and not preempted and self.stretch(decoding):
                continue
            prefill_only = not self.eng.mixes and (can_admit or bool(prefilling))
            self.iteration([] if prefill_only else decoding, prefilling, preempted)
        res = self.res
        for r in self.reqs:
            res.arrival[r.i], res.first[r.i], res.finish[r.i] = r.arrival, r.first, r.finish
        return res

    def preempt(self) -> bool:
        """A decode token that opens a new page takes one; the newest running request is preempted while too few
        are free. Whether any was."""
        page, res, preempted = self.rule.page, self.res, False
        while True:
            decoding = [r for r in self.running if r.done == r.target]
            need = sum(1 for r in decoding if r.prompt + r.produced >= r.pages * page)
            if need <= self.free or not self.running:
                return preempted
            victim = newest(self.running, lambda r: r.admitted_at)
            self.running.remove(victim)
            self.free += victim.pages
            victim.pages = 0
            # a decoding request returns to compute its last token and carry on; under prefix caching its KV
            # is found in the pages it freed, otherwise everything it had cached is computed again
            if victim.done == victim.target:
                res.resumed += 1
                victim.target = victim.prompt + victim.produced
                victim.done = victim.target - 1
            if not self.eng.prefix_caching:
                res.recomputed_tokens += victim.done
                victim.done = 0
            self.waiting.appendleft(victim)
            res.preemptions += 1
            preempted = True

    def can_admit(self, decode_tokens: int) -> bool:
        """Whether the queue's head may start beside ``decode_tokens`` decode tokens."""
        if not self.waiting or not self.rule.has_slot(len(self.running)):
            return False
        return self.admission(self.waiting[0], self.rule.budget - decode_tokens) is not None

    def admission(self, r: _Request, room: int) -> tuple[int, int] | None:
        return self.rule.admit(r.prompt, r.output, r.done, r.target - r.done, self.free, room)

    def stretch(self, decoding: list[_Request]) -> bool:
        """Decode-only iterations advanced at once, up to the first finish, the first page that does not fit or
        the first iteration scheduled after the next arrival; False when not even one fits."""
        steps = min(r.output - r.produced for r in decoding)
        if not self.eng.reserve_output:
            contexts = [(r.prompt + r.produced, r.pages) for r in decoding]
            steps = self.rule.steps_within(contexts, self.free, steps)
        if steps < 1:
            return False
        table, res, lag = self.table, self.res, self.eng.lag
        d = len(decoding)
        ctx = sum(r.prompt + r.produced for r in decoding)
        others = table.others_for(len(self.running), self.ratio)
        gpu = table.decode_run(d, ctx, steps, others)
        times = self.wall(gpu, d)
        if self.pending:  # stop before the first iteration scheduled after the next arrival
            ends = self.clock + np.cumsum(times)
            planned = ends - times if lag else ends  # when each iteration's successor is scheduled
            steps = min(steps, int(np.searchsorted(planned, self.pending[0][0])) + 1)
            times, gpu = times[:steps], gpu[:steps]
        for r in decoding:
            grown = self.rule.pages(r.prompt + r.produced + steps)
            if not self.eng.reserve_output:
                self.free -= grown - r.pages
                r.pages = grown
            r.produced += steps
        comm = table.decode_comm(d, others) * steps  # the collectives of these steps
        self.last_start = self.clock + float(times[:-1].sum())
        self.clock += float(times.sum())
        res.decode_s += float(gpu.sum()) - comm
        res.comm_s += comm
        res.overhead_s += float(times.sum() - gpu.sum())
        res.record(times, d, d, d, self.pages_total - self.free)
        for r in [r for r in decoding if r.produced >= r.output]:
            self.running.remove(r)
            self.finish(r)
        return True

    def batch(self, decode_now, prefilling, preempted) -> list[tuple[_Request, int]]:
        """(request, tokens) of the prompt chunks that ride in the next iteration beside ``decode_now``: the
        running prompts' next chunks, then the queue's head while the rule admits it; pages taken as they go."""
        rule, room = self.rule, self.rule.budget - len(decode_now)
        starting: list[tuple[_Request, int]] = []
        for r in decode_now:
            if not self.eng.reserve_output and r.prompt + r.produced >= r.pages * rule.page:
                r.pages += 1
                self.free -= 1
        for r in prefilling:
            cap = room if self.eng.reserve_output else min(room, (r.pages + self.free) * rule.page - r.done)
            c = rule.chunk(r.target - r.done, cap)  # no more than the budget and the free pages hold
            if c is None:
                break
            extra = max(rule.pages(r.done + c) - r.pages, 0)
            r.pages += extra
            self.free -= extra
            starting.append((r, c))
            room -= c
        while self.waiting and rule.has_slot(len(self.running)) and not preempted:
            r = self.waiting[0]
            admit = self.admission(r, room)
            if admit is None:
                break
            c, want = admit
            self.waiting.popleft()
            r.pages += want
            self.free -= want
            r.admitted_at = self.admitted
            self.admitted += 1
            self.running.append(r)
            starting.append((r, c))
            room -= c
        return starting

    def iteration(self, decode_now, prefilling, preempted) -> None:
        """One iteration: ``decode_now``'s decode tokens and the prompt chunks :meth:`batch` takes."""
        table, res = self.table, self.res
        starting = self.batch(decode_now, prefilling, preempted)
        chunks = [(r.done, c) for r, c in starting]
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
            others=table.others_for(len(self.running), self.ratio),
        )
        dt = float(self.wall(it.total_s, len(self.running)))
        tokens = len(decode_now) + sum(c for _, c in chunks)
        res.prefill_tokens += tokens - len(decode_now)
        self.last_start = self.clock
        if self.check:
            self.audit(tokens)
        self.clock += dt
        res.prefill_s += it.prefill_s
        res.decode_s += it.decode_s
        res.comm_s += it.comm_s
        res.overhead_s += dt - it.total_s
        res.prefill_iterations += 1 if chunks else 0
        res.record(np.array([dt]), len(decode_now), len(self.running), tokens, self.pages_total - self.free)
        done_now = []
        for r in decode_now:
            r.produced += 1
            if r.produced >= r.output:
                done_now.append(r)
        for r, c in starting:
            r.done += c
            if r.done == r.target:
                if r.first < 0:
                    r.first = self.clock
                r.produced += 1
                if r.produced >= r.output:
                    done_now.append(r)
        for r in done_now:
            self.running.remove(r)
            self.finish(r)

    def audit(self, tokens: int) -> None:
        """Record the iteration's broken limits (``check``)."""
        res, rule = self.res, self.rule
        if tokens > rule.budget:
            res.violations.append(f"iteration {res.iterations}: {tokens} tokens > budget {rule.budget}")
        if len(self.running) > rule.seq_limit:
            res.violations.append(f"iteration {res.iterations}: {len(self.running)} sequences > {rule.seq_limit}")
        if self.free < 0:
            res.violations.append(f"iteration {res.iterations}: KV pages overdrawn by {-self.free}")
