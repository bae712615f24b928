"""One engine's queue, running batch and KV pages, as :func:`costmodel.engine.simulate.simulate` advances them.

Every request's state is a column of arrays over all requests (prompt, output, tokens to prefill and prefilled,
tokens produced, pages held, when it was admitted), and the running batch an array of request numbers in the
order they were admitted. A decode step then updates the whole batch in a few array operations: under a load
that keeps the KV cache full, an engine preempts and readmits requests every few iterations, and a step costs
the same whether 10 or 1,000 sequences run.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from costmodel.core.errors import CostModelError
from costmodel.engine.load import arrival_times
from costmodel.engine.prefix_cache import PrefixCache
from costmodel.engine.scheduler import Admission, newest


class Engine:
    """The scheduler's state; :meth:`run` fills ``res`` (a :class:`costmodel.engine.simulate.SimResult`)."""

    def __init__(
        self,
        table,
        eng,
        rule: Admission,
        pages_total: int,
        prompts,
        outputs,
        wall,
        check: bool,
        res,
        spec=None,
        prefix: tuple | None = None,
    ):
        self.table, self.eng, self.rule, self.wall, self.check, self.res = table, eng, rule, wall, check, res
        # speculative decoding (costmodel.engine.speculation): each decode step scores `slots` positions per
        # sequence, yields the accepted tokens, and adds the proposer's time (spec.propose)
        self.spec = spec
        self.slots = spec.slots if spec is not None else 1
        self.n = len(prompts)
        self.ratio = float(np.mean(prompts)) / max(float(np.mean(outputs)), 1.0)  # prompt tokens per output token
        self.prompt = np.asarray(prompts, dtype=np.int64).copy()
        self.output = np.asarray(outputs).astype(np.int64)
        self.target = self.prompt.copy()  # tokens to prefill: the prompt, or prompt + produced after a preemption
        self.done = np.zeros(self.n, np.int64)  # of target prefilled
        self.produced = np.zeros(self.n, np.int64)
        self.verified = np.zeros(self.n, np.int64)  # verify steps run (speculative decoding)
        # the prefix cache (costmodel.engine.prefix_cache): prefix = (group, reusable tokens, turns) per request
        self.cache = PrefixCache(*prefix[:2], rule.page, prefix[2], res) if prefix and eng.reuse_prefix else None
        self.turns = prefix[2] if prefix else 1  # a conversation's turns, each sent when the one before finishes
        self.pages = np.zeros(self.n, np.int64)
        self.admitted_at = np.full(self.n, -1, np.int64)
        self.arrival, self.first, self.finish_at = np.zeros(self.n), np.full(self.n, -1.0), np.full(self.n, -1.0)
        self.pending: list[tuple[float, int]] = []  # (arrival, request) of requests not yet in the queue
        self.waiting: deque[int] = deque()
        self.running = np.zeros(0, np.int64)  # in the order they were admitted
        self.gone = np.zeros(self.n, bool)  # scratch: the requests leaving the batch (all False between uses)
        self.paging = not eng.reserve_output
        self.pages_total = self.free = pages_total
        self.clock = 0.0
        self.finished = self.admitted = 0
        self.closed_loop = False
        self.issued = self.n
        # when the iteration about to run was scheduled: its own start, or under an overlap scheduler the start of
        # the iteration before it (None: the engine was idle, and schedules as a request comes)
        self.last_start: float | None = None

    def load(self, concurrency, request_rate, burstiness, seed) -> None:
        """The first requests: every request of an open loop at its arrival, a closed loop's first per client (a
        conversation's later turns are sent as the turn before finishes: :meth:`next_turns`)."""
        t = self.turns
        if request_rate is not None:
            self.arrival[::t] = arrival_times(len(self.arrival[::t]), request_rate, burstiness, seed)
            self.pending = [(float(self.arrival[i]), i) for i in range(0, self.n, t)]
            heapq.heapify(self.pending)
        if concurrency is not None:
            self.closed_loop = True
            self.issued = min(concurrency * t, self.n)
            for i in range(0, self.issued, t):
                heapq.heappush(self.pending, (0.0, i))

    def next_turns(self, ids) -> None:
        """Finished requests ``ids``: each conversation's next turn is sent now; after a last turn (every request,
        without conversations) a closed loop's client sends its next request."""
        for v in np.asarray(ids).tolist():
            nxt = v + 1 if (v + 1) % self.turns else None
            if nxt is None and self.closed_loop and self.issued < self.n:
                nxt, self.issued = self.issued, self.issued + self.turns
            if nxt is not None and nxt < self.n:
                self.arrival[nxt] = self.clock
                heapq.heappush(self.pending, (self.clock, nxt))

    def retire(self, ids: np.ndarray) -> None:
        """Requests ``ids`` (running) finish now: their pages are freed and, in a closed loop, each client sends
        its next request."""
        if not len(ids):
            return
        self.gone[ids] = True
        self.running = self.running[~self.gone[self.running]]
        self.gone[ids] = False
        self.finish_at[ids] = self.clock
        self.release(ids, finished=True)
        self.finished += len(ids)
        self.next_turns(ids)

    def release(self, ids, finished: bool = False) -> None:
        """Free the pages ``ids`` hold (``finished``: done, else preempted), but those the prefix cache keeps."""
        if self.cache is None:
            self.free += int(self.pages[ids].sum())
        else:
            for v in np.asarray(ids).tolist():
                context = int(self.prompt[v] + self.produced[v])
                self.free += self.cache.release(v, int(self.pages[v]), context, finished, self.clock)
        self.pages[ids] = 0

    def hit(self, v: int) -> int:
        """The tokens request ``v`` finds in the prefix cache at admission (0 without one)."""
        return 0 if self.cache is None else self.cache.hit(v, int(self.done[v]), int(self.target[v]))

    def evict(self, need: int = 1) -> bool:
        """Free at least ``need`` pages from the prefix cache's unused groups, if it can; whether any were."""
        freed = 0 if self.cache is None else self.cache.evict(need)
        self.free += freed
        return freed > 0

    def run(self):
        res = self.res
        while self.finished < self.n:
            seen = self.last_start if (self.eng.lag and self.last_start is not None) else self.clock
            while self.pending and self.pending[0][0] <= seen:
                self.waiting.append(heapq.heappop(self.pending)[1])
            if not len(self.running) and not self.waiting:
                self.clock = max(self.clock, self.pending[0][0])
                self.last_start = None
                continue
            ids = self.running
            dec = self.done[ids] == self.target[ids]
            preempted = self.paging and self.preempt(dec)
            # an iteration that preempted admits nothing new (vLLM v1/core/sched/scheduler.py: waiting requests are
            # scheduled only when no running one was preempted), so the freed pages first serve the running
            # requests; with nothing left running, the queue's head may start
            preempted = preempted and bool(len(self.running))
            if preempted:
                ids = self.running
                dec = self.done[ids] == self.target[ids]
            decoding, prefilling = ids[dec], ids[~dec]
            can_admit = not preempted and self.can_admit(len(decoding) * self.slots if self.eng.mixes else 0)
            # decode-only stretch: nothing to prefill, and nothing can be admitted before a request finishes
            if len(decoding) and not len(prefilling) and not can_admit and not preempted and self.stretch(decoding):
                continue
            prefill_only = not self.eng.mixes and (can_admit or bool(len(prefilling)))
            self.iteration(decoding[:0] if prefill_only else decoding, prefilling, preempted)
        res.arrival, res.first, res.finish = self.arrival, self.first, self.finish_at
        return res

    def opens_pages(self, ids: np.ndarray) -> np.ndarray:
        """The new KV pages each of decoding requests ``ids`` takes this iteration: those its next token (or a
        verify step's ``slots`` positions) reaches past the pages it holds."""
        if self.slots == 1:  # one token: a page where the last one is full (a boolean array, summed as counts)
            return self.prompt[ids] + self.produced[ids] >= self.pages[ids] * self.rule.page
        reach = self.prompt[ids] + self.produced[ids] + self.slots
        return np.maximum(-(-reach // self.rule.page) - self.pages[ids], 0)

    def advance(self, ids: np.ndarray, steps: int) -> np.ndarray:
        """The tokens ``steps`` decode steps bring each of ``ids``: one a step, or the accepted tokens of that many
        verify steps (at most what each has left to produce)."""
        if self.spec is None:
            return steps
        got = self.spec.tokens(self.verified[ids] + steps) - self.spec.tokens(self.verified[ids])
        return np.minimum(got, self.output[ids] - self.produced[ids])

    def preempt(self, decoding: np.ndarray) -> bool:
        """A decode token that opens a new page takes one; the newest running request is preempted while too few
        are free (``decoding``: which running requests decode). Whether any was."""
        res, preempted = self.res, False
        opens = self.opens_pages(self.running)
        opens = decoding & opens if opens.dtype == bool else np.where(decoding, opens, 0)
        need = int(opens.sum())
        if need > self.free:
            self.evict(need - self.free)
        while need > self.free and len(self.running):
            k = newest(self.admitted_at[self.running])
            v = int(self.running[k])
            need -= int(opens[k])
            if k == len(self.running) - 1:  # the newest is the last admitted: the batch's tail
                self.running, opens = self.running[:-1], opens[:-1]
            else:
                self.running, opens = np.delete(self.running, k), np.delete(opens, k)
            self.release([v])
            # a decoding request returns to compute its last token and carry on; under prefix caching its KV
            # is found in the pages it freed, otherwise everything it had cached is computed again
            if self.done[v] == self.target[v]:
                res.resumed += 1
                self.target[v] = self.prompt[v] + self.produced[v]
                self.done[v] = self.target[v] - 1
            if not self.eng.prefix_caching:
                res.recomputed_tokens += int(self.done[v])
                self.done[v] = 0
            self.waiting.appendleft(v)
            res.preemptions += 1
            preempted = True
        return preempted

    def can_admit(self, decode_tokens: int) -> bool:
        """Whether the queue's head may start beside ``decode_tokens`` decode tokens."""
        if not self.waiting or not self.rule.has_slot(len(self.running)):
            return False
        return self.admission(self.waiting[0], self.rule.budget - decode_tokens) is not None

    def admission(self, v: int, room: int) -> tuple[int, int, int] | None:
        """(first chunk, pages to take, the prefix's included where it is lent, tokens found in the prefix cache)
        of waiting request ``v``, or None; an unused resident prefix is evicted when its pages would let ``v``
        start."""
        skip = self.hit(v)
        prompt, done = int(self.prompt[v]), int(self.done[v]) + skip
        lent = self.cache.pages_for(v) if skip else 0
        args = (prompt, int(self.output[v]), done, int(self.target[v]) - done)
        got = self.rule.admit(*args, self.free + lent, room)
        if got is None and not skip and self.evict(self.rule.pages(prompt) - self.free):
            got = self.rule.admit(*args, self.free, room)
        return None if got is None else (*got, skip)

    def stretch(self, decoding: np.ndarray) -> bool:
        """Decode-only iterations advanced at once, up to the first finish, the first page that does not fit or
        the first iteration scheduled after the next arrival; False when not even one fits."""
        d, spec = len(decoding), self.spec
        produced = self.produced[decoding]
        left = self.output[decoding] - produced
        cached = self.prompt[decoding] + produced
        steps = int(left.min()) if spec is None else int(spec.steps_for(self.verified[decoding], left).min())
        per_step = 1.0 if spec is None else spec.acceptance
        if self.paging:
            held = self.pages[decoding]
            steps = self.rule.steps_within(cached, held, self.free, steps, per_step, self.slots)
        if steps < 1:
            return False
        table, res, lag = self.table, self.res, self.eng.lag
        others = table.others_for(len(self.running), self.ratio)
        gpu = table.decode_run(d, int(cached.sum()), steps, others, per_step, self.slots)
        if spec is not None:
            gpu = gpu + spec.propose(d, (int(cached.sum()) + d * per_step * np.arange(steps)) / d)
        times = self.wall(gpu, d)
        if self.pending:  # stop before the first iteration scheduled after the next arrival
            ends = self.clock + np.cumsum(times)
            planned = ends - times if lag else ends  # when each iteration's successor is scheduled
            steps = min(steps, int(np.searchsorted(planned, self.pending[0][0])) + 1)
            times, gpu = times[:steps], gpu[:steps]
        added = self.advance(decoding, steps)
        if self.paging:  # what the last step wrote: its accepted tokens and the slots of the drafts it scored
            grown = -(-(cached + added + self.slots - 1) // self.rule.page)
            if spec is not None:  # a step's drafts may have reached a page its accepted tokens do not fill
                grown = np.maximum(grown, held)
            self.free -= int((grown - held).sum())
            self.pages[decoding] = grown
        self.produced[decoding] += added
        if spec is not None:
            self.verified[decoding] += steps
        comm = table.decode_comm(d * self.slots, others, d) * steps  # the collectives of these steps
        self.last_start = self.clock + float(times[:-1].sum())
        self.clock += float(times.sum())
        res.decode_s += float(gpu.sum()) - comm
        res.comm_s += comm
        res.overhead_s += float(times.sum() - gpu.sum())
        res.record(times, d, d, d * self.slots, self.pages_total - self.free)
        self.retire(
            decoding[left <= added] if spec is None else decoding[self.produced[decoding] >= self.output[decoding]]
        )
        return True

    def batch(self, decode_now: np.ndarray, prefilling: np.ndarray, preempted: bool) -> list[tuple[int, int]]:
        """(request, tokens) of the prompt chunks that ride in the next iteration beside ``decode_now``: the
        running prompts' next chunks, then the queue's head while the rule admits it; pages taken as they go."""
        rule, room = self.rule, self.rule.budget - len(decode_now) * self.slots
        starting: list[tuple[int, int]] = []
        if self.paging and len(decode_now):
            opening = self.opens_pages(decode_now)
            self.pages[decode_now] += opening
            self.free -= int(opening.sum())
        for v in prefilling.tolist():
            held, done = int(self.pages[v]), int(self.done[v])
            cap = min(room, (held + self.free) * rule.page - done) if self.paging else room
            c = rule.chunk(int(self.target[v]) - done, cap)  # no more than the budget and the free pages hold
            if c is None:
                break
            extra = max(rule.pages(done + c) - held, 0)
            self.pages[v] += extra
            self.free -= extra
            starting.append((v, c))
            room -= c
        admitted = []
        while self.waiting and rule.has_slot(len(self.running) + len(admitted)) and not preempted:
            v = self.waiting[0]
            admit = self.admission(v, room)
            if admit is None:
                break
            c, want, skip = admit
            self.waiting.popleft()
            lent = 0
            if skip:  # the cached prefix is lent: its pages are not taken again, its tokens not computed
                self.done[v] += skip
                lent = self.cache.lend(v, self.clock)
                self.res.prefix_hit_tokens += skip
            self.pages[v] += want
            self.free -= want - lent
            self.admitted_at[v] = self.admitted
            self.admitted += 1
            admitted.append(v)
            starting.append((v, c))
            room -= c
        if admitted:
            self.running = np.concatenate([self.running, np.array(admitted, np.int64)])
        return starting

    def iteration(self, decode_now: np.ndarray, prefilling: np.ndarray, preempted: bool) -> None:
        """One iteration: ``decode_now``'s decode tokens and the prompt chunks :meth:`batch` takes."""
        table, res = self.table, self.res
        starting = self.batch(decode_now, prefilling, preempted)
        chunks = [(int(self.done[v]), c) for v, c in starting]
        outputs_rows = sum(1 for v, c in starting if self.done[v] + c == self.target[v])
        if not len(decode_now) and not chunks:
            raise CostModelError(
                "the engine cannot schedule any request: raise the token budget, the sequence limit or the KV cache"
            )
        d, running = len(decode_now), len(self.running)
        context_sum = int((self.prompt[decode_now] + self.produced[decode_now]).sum())
        it = table.time(
            decode_seqs=d,
            decode_context_sum=context_sum,
            chunks=chunks,
            outputs=d * self.slots + outputs_rows,
            others=table.others_for(running, self.ratio),
            slots=self.slots,
        )
        gpu = it.total_s + (float(self.spec.propose(d, context_sum / d)) if self.spec is not None and d else 0.0)
        dt = float(self.wall(gpu, running))
        tokens = d * self.slots + sum(c for _, c in chunks)
        res.prefill_tokens += tokens - d
        self.last_start = self.clock
        if self.check:
            self.audit(tokens)
        self.clock += dt
        res.prefill_s += it.prefill_s
        res.decode_s += it.decode_s
        res.comm_s += it.comm_s
        res.decode_s += gpu - it.total_s  # the proposer's drafting
        res.overhead_s += dt - gpu
        res.prefill_iterations += 1 if chunks else 0
        res.record(np.array([dt]), d, running, tokens, self.pages_total - self.free)
        self.produced[decode_now] += self.advance(decode_now, 1)
        if self.spec is not None:
            self.verified[decode_now] += 1
        done_now = decode_now[self.produced[decode_now] >= self.output[decode_now]].tolist()
        for v, c in starting:
            self.done[v] += c
            if self.cache is not None:  # a shared prefix passed: the cache keeps its pages
                self.cache.prefilled(v, int(self.done[v]), self.clock)
            if self.done[v] == self.target[v]:
                if self.first[v] < 0:
                    self.first[v] = self.clock
                self.produced[v] += 1
                if self.produced[v] >= self.output[v]:
                    done_now.append(v)
        self.retire(np.array(done_now, np.int64))

    def audit(self, tokens: int) -> None:
        """Record the iteration's broken limits (``check``)."""
        res, rule = self.res, self.rule
        if tokens > rule.budget:
            res.violations.append(f"iteration {res.iterations}: {tokens} tokens > budget {rule.budget}")
        if len(self.running) > rule.seq_limit:
            res.violations.append(f"iteration {res.iterations}: {len(self.running)} sequences > {rule.seq_limit}")
        if self.free < 0:
            res.violations.append(f"iteration {res.iterations}: KV pages overdrawn by {-self.free}")
