"""The largest batch and context that fit: one algorithm each, checked against brute force and by hand."""

from __future__ import annotations

import pytest

import costmodel
from costmodel.core.fits import largest_count, largest_fitting


@pytest.mark.parametrize("capacity", [0, 1, 99, 100, 101, 12_345])
@pytest.mark.parametrize("grow", ["linear", "window", "flat"])
def test_largest_fitting_equals_brute_force(capacity, grow):
    """A cache of 7 + 3 c bytes (linear), one that stops growing at a window of 20, and one that never grows."""
    size = {"linear": lambda c: 7 + 3 * c, "window": lambda c: 7 + 3 * min(c, 19), "flat": lambda c: 7}[grow]
    fits = lambda c: size(c) <= capacity  # noqa: E731
    limit = 10_000
    brute = max((c for c in range(limit + 1) if fits(c)), default=0)
    assert largest_fitting(fits, limit) == brute


def test_largest_count_edges():
    assert largest_count(100.0, 30.0) == 3
    assert largest_count(0.0, 30.0) == 0 and largest_count(-5.0, 30.0) == 0
    assert largest_count(100.0, 0.0, limit=77) == 77


def test_attention_memory_fit_by_hand():
    """MQA decode on an H100 at b 16, d 4096, 32 heads of 128, bf16: K and V of one head, 128 wide, per sequence
    and position; weights are q and o (d x d) and k and v (d x 128)."""
    w = costmodel.Workload.create("mqa", batch=16, context=4096)
    mem = costmodel.predict(w, costmodel.load_profile("h100")).memory
    weights = 2 * (2 * 4096 * 4096 + 2 * 4096 * 128)
    per_position = 2 * 2 * 128  # K and V of one head, bf16
    free = 80e9 - weights
    assert mem.weight_bytes == weights
    assert mem.max_batch == int(free // (per_position * 4097))  # after the step: 4096 + 1 positions
    assert mem.max_context == int(free // (16 * per_position)) - 1
