"""The one admission rule every simulated engine schedules by, iteration by iteration.

An iteration carries at most ``max_num_batched_tokens`` tokens (the token budget) and ``max_num_seqs`` running
sequences. A prompt takes what is left of the budget: all of it at once, or, when the engine chunks prefills, as
much as fits (the rest in later iterations); without chunking a prompt that does not fit waits. KV pages hold
``page_size`` tokens each: an engine that reserves takes pages for a request's prompt and whole output when it
admits it, the others take them as tokens are cached and, when the cache runs out, preempt a running request.

The single-pool simulation (:mod:`costmodel.engine.simulate`) and both pools of a disaggregated deployment
(:mod:`costmodel.deploy.pools`) take every admission decision through :class:`Admission`; the closed forms
(:mod:`costmodel.engine.steady`) take the same limits as means.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.engine.config import EngineConfig


def pages(tokens: int, page: int) -> int:
    """KV pages that hold ``tokens`` tokens."""
    return -(-tokens // page)


@dataclass(frozen=True)
class Admission:
    """An engine's limits per iteration and its page rule (from :class:`costmodel.engine.config.EngineConfig`)."""

    budget: int  # tokens one iteration may carry
    seq_limit: int  # sequences running at once
    page: int  # tokens per KV page
    chunked: bool  # a prompt may be split over iterations
    reserve_output: bool  # a request is admitted only with pages for its prompt and whole output

    @classmethod
    def of(cls, eng: EngineConfig) -> Admission:
        return cls(
            budget=eng.max_num_batched_tokens,
            seq_limit=eng.max_num_seqs,
            page=eng.page_size,
            chunked=eng.chunked_prefill,
            reserve_output=eng.reserve_output,
        )

    def pages(self, tokens: int) -> int:
        """KV pages that hold ``tokens`` tokens."""
        return pages(tokens, self.page)

    def has_slot(self, running: int) -> bool:
        """Whether one more sequence may run beside ``running``."""
        return running < self.seq_limit

    def chunk(self, left: int, room: int) -> int | None:
        """The tokens of a prompt with ``left`` still to prefill that an iteration with ``room`` of its budget
        left takes: all of them, or as many as fit when the engine chunks prefills; None when it takes none."""
        if room <= 0:
            return None
        c = min(left, room)
        if c < left and not self.chunked:
            return None
        return c

    def start_pages(self, prompt: int, output: int, cached: int) -> int:
        """Pages a request takes when it is admitted with ``cached`` tokens in the cache after its first
        iteration: its whole context's when the engine reserves, else those ``cached`` fill."""
        return self.pages(prompt + output) if self.reserve_output else self.pages(cached)

    def admit(self, prompt: int, output: int, done: int, left: int, free: int, room: int) -> tuple[int, int] | None:
        """(first chunk, pages to take) of a waiting request with ``done`` tokens cached and ``left`` to prefill,
        starting with ``room`` of the budget and ``free`` pages; None when it cannot start now."""
        c = self.chunk(left, room)
        if c is None:
            return None
        want = self.start_pages(prompt, output, done + c)
        return (c, want) if want <= free else None

    def steps_within(
        self, cached: np.ndarray, held: np.ndarray, free: int, steps: int, per_step: float = 1.0, slots: int = 1
    ) -> int:
        """The most decode steps (at most ``steps``) whose new pages fit in ``free``, for running sequences with
        ``cached`` tokens in the cache and ``held`` pages (arrays, one entry per sequence). A step yields
        ``per_step`` tokens and writes ``slots`` positions (speculative decoding: the accepted tokens, and the
        verified drafts' slots; one and one otherwise)."""

        def need(k: int) -> int:
            if per_step == 1.0 and slots == 1:
                return int((-(-(cached + k) // self.page) - held).sum())
            reach = cached + int(np.ceil(per_step * (k - 1))) + slots
            return int(np.maximum(-(-reach // self.page) - held, 0).sum())

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


def newest(admitted_at: np.ndarray) -> int:
    """Which of the running requests, admitted at ``admitted_at``, a paging engine preempts when a decode token
    finds no free page: the one admitted last (vLLM v1/core/sched/scheduler.py pops the running queue's tail)."""
    return int(np.argmax(admitted_at))


def fewest_out(running: list, out, prompt) -> object:
    """The request SGLang retracts when the next decode step does not fit its cache: the one with the fewest
    tokens out, the longest prompt among equals (python/sglang/srt/managers/schedule_batch.py retract_decode)."""
    return min(running, key=lambda r: (out(r), -prompt(r)))
