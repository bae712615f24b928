"""The workers of a disaggregated deployment's two pools as :mod:`costmodel.deploy.pools` simulates them: each prefill worker's queue and batch, each decode worker's running requests, cache and planned run, every admission through :class:`costmodel.engine.scheduler.Admission`."""

from __future__ import annotations

from collections import deque

import numpy as np

from costmodel.engine.scheduler import Admission, fewest_out
from costmodel.engine.served import Setup

#: Engines whose prefill (context) workers run without the overlap scheduler in a disaggregated deployment while
#: their decode workers keep it: TensorRT-LLM's disaggregated-serving guide (trtllm-serve) gives the context servers
#: ``disable_overlap_scheduler: True`` ("not yet supported in disaggregated context server architectures") and the
#: generation servers the default. SGLang runs its overlap loops in both roles (event_loop_overlap_disagg_prefill,
#: event_loop_overlap_disagg_decode); vLLM 0.12 schedules without overlap in both.
PREFILL_POOL_WITHOUT_OVERLAP = ("trtllm",)


#: Engines whose decode worker reserves a request's KV pages before its prefill runs: SGLang's bootstrap
#: (python/sglang/srt/disaggregation/decode.py DecodePreallocQueue: "pre-allocate kv once there is available kv";
#: prefill.py PrefillBootstrapQueue holds a request until "bootstrap (handshake and preallocation)" is done, then
#: runs its forward), so a request that finds the decode pool full waits before its prefill, in TTFT. TensorRT-LLM's
#: disaggregated server sends a request to a context server first and to a generation server with the result,
#: whose scheduler then admits it (wait after the first token, in TPOT); vLLM's KV connectors likewise.
DECODE_RESERVES_FIRST = ("sglang",)


class Request:
    __slots__ = ("arrival", "prompt", "output", "done", "prefilled", "first", "finish", "queued", "worker")

    def __init__(self, arrival, prompt, output):
        self.arrival, self.prompt, self.output = arrival, prompt, output
        self.worker = -1  # the decode worker that reserved its pages (engines of DECODE_RESERVES_FIRST)
        self.done = 0
        self.prefilled = self.first = self.finish = -1.0
        self.queued = arrival  # when it joined its current worker's queue


class PrefillPool:
    """The prefill pool: each worker's queue, and the iterations it ran."""

    def __init__(self, pre: Setup, engines: int):
        self.setup, self.rule = pre, Admission.of(pre.eng)
        self.queue = [deque() for _ in range(engines)]
        self.left = [0] * engines  # prompt tokens waiting or in flight
        self.busy = [False] * engines
        self.time = np.zeros(engines)
        self.iters = self.seqs = 0

    def batch(self, w: int, seen: float) -> list[tuple[Request, int]]:
        """(request, tokens) of worker ``w``'s next iteration: the queue's prompts that had reached it by ``seen``,
        while the rule admits them and their whole caches (held until sent) fit the worker's."""
        batch, room, held = [], self.rule.budget, 0
        for r in self.queue[w]:
            c = self.rule.chunk(r.prompt - r.done, room)
            if not self.rule.has_slot(len(batch)) or c is None or held + r.prompt > self.setup.kv_tokens:
                break
            if r.queued > seen:
                break
            held += r.prompt
            batch.append((r, c))
            room -= c
        return batch


class DecodePool:
    """The decode pool: each worker's running and waiting requests, cache and planned run."""

    def __init__(self, dec: Setup, engines: int):
        self.setup, self.rule = dec, Admission.of(dec.eng)
        self.run: list[list[Request]] = [[] for _ in range(engines)]
        self.wait = [deque() for _ in range(engines)]
        self.busy = [False] * engines
        self.ctx = [0] * engines  # cached positions of the running sequences, all together
        self.pages = [0] * engines
        self.wait_pages = [0] * engines  # pages the waiting requests will take
        self.time = np.zeros(engines)
        self.iters = self.seqs = 0
        # each busy worker's planned run: (start, step ends, step times); a "decoded" event counts only while its
        # number is the worker's latest (a request that reaches the worker cuts the run short)
        self.plan: list = [None] * engines
        self.token = [0] * engines
        self.pages_total = dec.kv_tokens // self.rule.page
        self.first_reserve = dec.eng.name in DECODE_RESERVES_FIRST
        # reserved first (SGLang): a held request has pages for its prompt; running ones grow a token a step within
        # the cache, every held request keeping `reserve_tokens` of headroom at admission; retracted ones wait
        self.held = [0] * engines  # requests a worker holds pages for, from before their prefill
        self.reserve_tokens = dec.eng.reserved_decode_tokens
        self.retracted: list[deque] = [deque() for _ in range(engines)]
        self.retractions = 0

    def pages_of(self, r: Request) -> int:
        return self.rule.pages(r.prompt + r.output)

    def held_pages(self, r: Request) -> int:
        """Pages a decode worker holds for a request before it runs: reserved first, its prompt's; else its whole
        context's."""
        return self.rule.pages(r.prompt) if self.first_reserve else self.pages_of(r)

    @staticmethod
    def cached(r: Request) -> int:
        """The tokens a running request's cache holds: its prompt, its first token and those decoded since."""
        return r.prompt + 1 + r.done

    def need(self, r: Request) -> int:
        """A retracted request's tokens and headroom to resume."""
        return self.cached(r) + self.reserve_tokens

    def allocatable(self, j: int, count_retracted: bool = True) -> int:
        """Reserved first: the tokens worker ``j`` may still hand out (SGLang's _allocatable_tokens): its cache
        less the running sequences' tokens, the held prompts' pages, a headroom per request it holds, and (with
        ``count_retracted``) what its retracted requests need to resume."""
        back = sum(self.need(r) for r in self.retracted[j]) if count_retracted else 0
        return (
            self.setup.kv_tokens
            - self.ctx[j]
            - self.rule.page * self.wait_pages[j]
            - self.reserve_tokens * self.held[j]
            - back
        )

    def admits(self, w: int, r: Request) -> bool:
        """Whether worker ``w`` takes waiting request ``r`` now: a free slot and, unless it holds the pages
        already, pages for its whole context."""
        if not self.rule.has_slot(len(self.run[w])):
            return False
        return self.first_reserve or self.pages[w] + self.pages_of(r) <= self.pages_total

    def join(self, w: int, seen: float) -> None:
        """Worker ``w``'s retracted requests resume first, once it can hand out their tokens and headroom (an idle
        worker takes one back whatever the headroom: it alone fits the cache); then the requests that had reached
        it by ``seen``, in order, while the rule admits them."""
        run, q, back = self.run[w], self.wait[w], self.retracted[w]
        while (
            back
            and self.rule.has_slot(len(run))
            and (not run or self.need(back[0]) <= self.allocatable(w, count_retracted=False))
        ):
            r = back.popleft()
            run.append(r)
            self.ctx[w] += self.cached(r)
        while q and not back and self.admits(w, q[0]) and q[0].queued <= seen:
            r = q.popleft()
            self.wait_pages[w] -= self.held_pages(r)
            run.append(r)
            self.ctx[w] += r.prompt + 1
            if not self.first_reserve:
                self.pages[w] += self.pages_of(r)

    def retract(self, w: int) -> int | None:
        """Reserved first: the steps every running sequence of worker ``w`` can still grow within the cache,
        retracting (:func:`costmodel.engine.scheduler.fewest_out`) while not even one fits; None otherwise."""
        run, fit = self.run[w], None
        while self.first_reserve and run:
            fit = (self.setup.kv_tokens - self.rule.page * self.wait_pages[w] - self.ctx[w]) // len(run)
            if fit >= 1:
                break
            victim = fewest_out(run, lambda r: r.done, lambda r: r.prompt)
            run.remove(victim)
            self.ctx[w] -= self.cached(victim)
            self.retracted[w].append(victim)
            self.retractions += 1
        return fit
