"""Both pools of a disaggregated deployment simulated event by event: prefill workers running prompts alone, the
KV cache of each finished prompt crossing to a decode worker, decode workers running decode-only iterations.

Every admission goes through the one rule of :mod:`costmodel.engine.scheduler`: a prefill worker's batch is a
single-pool iteration without decode tokens (its token budget, sequence limit and chunking, and the prompts'
cache on the worker until sent); a decode worker admits a request with a free sequence slot and pages for its
whole context, or, for an engine of :data:`DECODE_RESERVES_FIRST`, holds the prompt's pages from before the
prefill and retracts a running request (:func:`costmodel.engine.scheduler.fewest_out`) where the next step does
not fit.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from costmodel.deploy.workers import DecodePool, PrefillPool, Request
from costmodel.engine.load import arrival_times
from costmodel.engine.reports import Stats
from costmodel.engine.served import Setup
from costmodel.hardware.profile import HardwareProfile


@dataclass(frozen=True)
class Pool:
    """One side of a disaggregated deployment: ``workers`` engines of ``tp`` devices each (of ``gpu``, the
    deployment's device when None), with the engine's limits where given; a worker of a mixture of experts may be
    ``attention_dp`` groups of ``tp`` devices with the experts over all of them (whole with ``expert_parallel``,
    else each expert's width sharded), each group taking its own requests (the other groups of the worker taken as
    loaded like it)."""

    tp: int = 1
    workers: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    expert_parallel: bool = False
    gpu: HardwareProfile | None = None
    attention_dp: int = 1  # each worker: this many attention data parallel groups of tp devices, experts over all

    def devices(self) -> int:
        return self.tp * self.attention_dp * self.workers

    @property
    def engines(self) -> int:
        """The engines requests are spread over: every attention data parallel group of every worker."""
        return self.workers * self.attention_dp


class _Pools:
    """The event loop of :func:`simulate`: arrivals, prefill iterations, transfers and decode runs."""

    def __init__(self, pre: Setup, dec: Setup, p, d, prompts, outputs, concurrency, transfer_s, check: bool):
        self.pre, self.dec = pre, dec
        self.p_engines, self.d_engines = p.engines, d.engines
        self.prompts, self.outputs, self.n = prompts, outputs, len(prompts)
        self.concurrency, self.transfer_s, self.check = concurrency, transfer_s, check
        self.reqs: list[Request] = []
        self.events: list = []  # (time, order, kind, payload)
        self.order = 0
        self.P = PrefillPool(pre, p.engines)
        self.D = DecodePool(dec, d.engines)
        self.waits = 0  # requests that reached a decode worker with no slot or pages for them
        self.violations: list = []
        self.gate: deque = deque()  # reserved first: requests waiting for a decode worker with room, before prefill

    def push(self, t, kind, x) -> None:
        heapq.heappush(self.events, (t, self.order, kind, x))
        self.order += 1

    def new_request(self, t) -> None:
        r = Request(t, int(self.prompts[len(self.reqs)]), int(self.outputs[len(self.reqs)]))
        self.reqs.append(r)
        self.push(t, "arrive", r)

    def finish(self, r: Request, t) -> None:
        r.finish = t
        if self.concurrency is not None and len(self.reqs) < self.n:
            self.new_request(t)

    def reserve(self, r: Request) -> bool:
        """Reserved first: the decode worker with the fewest requests among those that can take ``r`` (its prompt's
        pages and the headroom within what the worker may hand out) holds its prompt's pages (its ``worker``), or
        False where none can."""
        D = self.D
        room = [
            j for j in range(self.d_engines) if D.rule.page * D.held_pages(r) + D.reserve_tokens <= D.allocatable(j)
        ]
        if not room:
            return False
        r.worker = min(room, key=lambda j: (D.held[j], j))
        D.held[r.worker] += 1
        D.wait_pages[r.worker] += D.held_pages(r)
        return True

    def to_prefill(self, r: Request, t) -> None:
        P = self.P
        w = min(range(self.p_engines), key=lambda j: (P.left[j], j))
        r.queued = t
        P.queue[w].append(r)
        P.left[w] += r.prompt
        if not P.busy[w]:
            self.start_prefill(w, t)

    def released(self, w, t) -> None:
        """A request left decode worker ``w``: reserved first, the waiting requests that now fit go to prefill."""
        if self.D.first_reserve:
            self.D.held[w] -= 1
            while self.gate and self.reserve(self.gate[0]):
                self.to_prefill(self.gate.popleft(), t)

    def start_prefill(self, w, t, seen=None) -> None:
        """The worker's next iteration at ``t``, of the requests that had reached it by ``seen`` (an overlap
        scheduler planned it while the last one ran; an idle worker takes what it has)."""
        P = self.P
        q = P.queue[w]
        if not q:
            P.busy[w] = False
            return
        if seen is None or q[0].queued > seen:
            seen = t
        batch = P.batch(w, seen)
        it = self.pre.table.time(
            decode_seqs=0,
            decode_context_sum=0.0,
            chunks=[(r.done, c) for r, c in batch],
            outputs=sum(1 for r, c in batch if r.done + c == r.prompt),
        )
        dt = self.pre.wall(it.total_s, len(batch))
        P.busy[w] = True
        self.push(t + dt, "prefilled", (w, batch, dt))

    def start_decode(self, w, t, seen=None) -> None:
        """The worker's next decode iterations from ``t``, admitting the requests that had reached it by ``seen``
        (an overlap scheduler planned the iteration while the last one ran; an idle worker takes what it has):
        decode-only iterations until the first running request finishes, or until a request that reaches the
        worker meanwhile joins (:meth:`cut`)."""
        D = self.D
        if seen is None or not D.run[w]:
            seen = t
        D.join(w, seen)
        fit = D.retract(w)
        run, q = D.run[w], D.wait[w]
        if not run:
            D.busy[w] = False
            return
        D.busy[w] = True
        k = min(r.output - 1 - r.done for r in run)
        if fit is not None:
            k = min(k, fit)
        if q and q[0].queued > seen:  # one came while the last iteration ran: it joins after the next one
            k = 1
        times = self.dec.wall(self.dec.table.decode_run(len(run), D.ctx[w], k), len(run))
        self.plan(w, t, t + np.cumsum(times), times)

    def plan(self, w, t, ends, times) -> None:
        self.D.plan[w] = (t, ends, times)
        self.D.token[w] += 1
        self.push(float(ends[-1]), "decoded", (w, self.D.token[w]))

    def cut(self, w, t) -> None:
        """A request reached busy decode worker ``w`` at ``t``: its run ends where the request is admitted if there
        is room: with the iteration under way (an iteration that ends at ``t`` is under way), or under an overlap
        scheduler with the first iteration that starts at ``t`` or later (planned once the request was there)."""
        start, ends, times = self.D.plan[w]
        if self.dec.eng.lag:
            steps = int(np.searchsorted(np.concatenate(([start], ends[:-1])), t, side="left")) + 1
        else:
            steps = int(np.searchsorted(ends, t, side="left")) + 1
        if steps < len(ends):
            self.plan(w, start, ends[:steps], times[:steps])

    def arrived(self, r: Request, t) -> None:
        if self.D.first_reserve and (self.gate or not self.reserve(r)):
            self.waits += 1
            self.gate.append(r)
        else:
            self.to_prefill(r, t)

    def prefilled(self, w, batch, dt, t) -> None:
        P, pre = self.P, self.pre
        P.iters += 1
        P.seqs += len(batch)
        P.time[w] += dt
        if self.check and (
            sum(c for _, c in batch) > P.rule.budget
            or len(batch) > P.rule.seq_limit
            or sum(r.prompt for r, _ in batch) > pre.kv_tokens
        ):
            self.violations.append(("prefill budget", t))
        for r, c in batch:
            r.done += c
            P.left[w] -= c
            if r.done == r.prompt:
                P.queue[w].remove(r)
                r.prefilled = t
                r.first = t + self.transfer_s
                r.done = 0  # now: decode tokens produced after the first
                self.push(r.first, "transferred", r)
        self.start_prefill(w, t, t - dt if pre.eng.lag else None)

    def transferred(self, r: Request, t) -> None:
        D = self.D
        if r.output == 1:
            if D.first_reserve:
                D.wait_pages[r.worker] -= D.held_pages(r)
                self.released(r.worker, t)
            self.finish(r, t)
            return
        if D.first_reserve:
            w = r.worker
            self.waits += len(D.run[w]) + len(D.wait[w]) >= D.rule.seq_limit
        else:
            w = min(range(self.d_engines), key=lambda j: (len(D.run[j]) + len(D.wait[j]), j))
            held = len(D.run[w]) + len(D.wait[w])
            D.wait_pages[w] += D.pages_of(r)
            self.waits += held >= D.rule.seq_limit or D.pages[w] + D.wait_pages[w] > D.pages_total
        r.queued = t
        D.wait[w].append(r)
        if not D.busy[w]:
            self.start_decode(w, t)
        else:
            self.cut(w, t)

    def decoded(self, w, token, t) -> None:
        D, dec = self.D, self.dec
        if token != D.token[w]:
            return  # a run cut short: its own event is the one that counts
        start, ends, times = D.plan[w]
        steps, dt, last = len(ends), float(ends[-1] - start), float(times[-1])
        run = D.run[w]
        D.iters += steps
        D.seqs += steps * len(run)
        D.time[w] += dt
        over = (
            D.ctx[w] + steps * len(run) + D.rule.page * D.wait_pages[w] > dec.kv_tokens
            if D.first_reserve
            else D.pages[w] > D.pages_total
        )
        if self.check and (len(run) > D.rule.seq_limit or over):
            self.violations.append(("decode limits", t))
        D.ctx[w] += steps * len(run)
        still = []
        for r in run:
            r.done += steps
            if r.done == r.output - 1:
                D.ctx[w] -= D.cached(r)
                if not D.first_reserve:
                    D.pages[w] -= D.pages_of(r)
                self.released(w, t)
                self.finish(r, t)
            else:
                still.append(r)
        D.run[w] = still
        self.start_decode(w, t, t - last if dec.eng.lag else None)

    def run(self) -> None:
        while self.events:
            t, _, kind, x = heapq.heappop(self.events)
            if kind == "arrive":
                self.arrived(x, t)
            elif kind == "prefilled":
                self.prefilled(*x, t)
            elif kind == "transferred":
                self.transferred(x, t)
            else:
                self.decoded(*x, t)


def simulate(
    pre: Setup,
    dec: Setup,
    p,
    d,
    *,
    prompts,
    outputs,
    concurrency,
    request_rate,
    transfer_s,
    seed: int,
    check: bool = False,
    burstiness: float = 1.0,
) -> _Pools:
    """``len(prompts)`` requests through prefill pool ``p`` and decode pool ``d`` (:class:`Pool`), under a closed
    loop of ``concurrency`` clients or arrivals at ``request_rate``; each prompt's cache takes ``transfer_s``."""
    sim = _Pools(pre, dec, p, d, prompts, outputs, concurrency, transfer_s, check)
    if concurrency is not None:
        for _ in range(min(concurrency, sim.n)):
            sim.new_request(0.0)
    else:
        for t in arrival_times(sim.n, request_rate, burstiness, seed):
            sim.new_request(float(t))
    sim.run()
    return sim


def simulated(
    pre: Setup,
    dec: Setup,
    p,
    d,
    *,
    prompts,
    outputs,
    input_len,
    warmup,
    concurrency,
    request_rate,
    transfer_s,
    seed,
    check,
    burstiness: float = 1.0,
) -> dict:
    """The simulation's per-request times as the report's statistics (``input_len``: the mean prompt, whose prefill
    alone the report's queueing is measured against)."""
    sim = simulate(
        pre,
        dec,
        p,
        d,
        prompts=prompts,
        outputs=outputs,
        concurrency=concurrency,
        request_rate=request_rate,
        transfer_s=transfer_s,
        seed=seed,
        check=check,
        burstiness=burstiness,
    )
    if check and sim.violations:
        raise AssertionError(f"limits broken: {sim.violations[:3]}")
    kept = sim.reqs[warmup:]
    arrival = np.array([r.arrival for r in kept])
    prefilled = np.array([r.prefilled for r in kept])
    first = np.array([r.first for r in kept])
    finish = np.array([r.finish for r in kept])
    out = np.array([r.output for r in kept])
    front = pre.request_s
    more = out > 1
    tpot = (finish[more] - first[more]) / (out[more] - 1)
    e2e = finish - arrival + front
    span = float(finish.max() - arrival.min())
    prefill_alone = prefill_time(pre, input_len)
    P, D = sim.P, sim.D
    return {
        "ttft": Stats.of(first - arrival + front),
        "tpot": Stats.of(tpot),
        "e2e": Stats.of(e2e),
        "queue_s": float(np.mean(prefilled - arrival)) - prefill_alone,
        "prefill_s": prefill_alone,
        "requests_per_s": len(kept) / span,
        "per_user": float(np.mean(out / np.maximum(e2e, 1e-12))),
        "waits": int(sim.waits),
        "prefill": {
            "mean_batch": P.seqs / max(P.iters, 1),
            "iterations": P.iters,
            "busy_share": float(np.mean(P.time)) / max(span, 1e-12),
        },
        "decode": {
            "mean_batch": D.seqs / max(D.iters, 1),
            "iterations": D.iters,
            "busy_share": float(np.mean(D.time)) / max(span, 1e-12),
        },
    }


def prefill_time(pre: Setup, prompt: int) -> float:
    """One prompt alone through a prefill worker: its chunks, iteration by iteration."""
    t, done, budget = 0.0, 0, pre.eng.max_num_batched_tokens
    while done < prompt:
        c = min(budget, prompt - done)
        t += pre.wall(
            pre.table.time(
                decode_seqs=0, decode_context_sum=0.0, chunks=[(done, c)], outputs=int(done + c == prompt)
            ).total_s,
            1,
        )
        done += c
    return t
