"""What fits in device memory: the largest batch and the largest context, one algorithm each, for an attention
workload (:func:`costmodel.attention.roofline.memory_fit`) and a whole model (:func:`costmodel.model.step.predict_model`)."""

from __future__ import annotations

from costmodel.core.vocab import MAX_DIM


def largest_count(free: float, per_unit: float, limit: int = MAX_DIM) -> int:
    """The most units of ``per_unit`` bytes in ``free`` bytes (memory linear in the count: sequences of a batch),
    at most ``limit``; 0 when nothing is free, ``limit`` when a unit takes nothing."""
    if free <= 0:
        return 0
    if per_unit <= 0:
        return limit
    return min(int(free // per_unit), limit)


def largest_fitting(fits, limit: int = MAX_DIM) -> int:
    """The largest ``x`` in 0 .. ``limit`` for which ``fits(x)`` holds, ``fits`` being monotone (true, then
    false: a context whose cache grows, linearly or up to a window); 0 when even 0 does not fit. Doubling, then
    bisection: about 2 log2(limit) calls."""
    if not fits(0):
        return 0
    if fits(limit):
        return limit
    lo, hi = 0, 1
    while fits(hi):  # hi < limit here: fits(limit) is false
        lo, hi = hi, min(hi * 2, limit)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


__all__ = ["largest_count", "largest_fitting"]
