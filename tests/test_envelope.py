"""A long sweep's figure is drawn from its envelope (costmodel.attention.sweeps.Envelope), gathered a chunk at a
time: every bin's least and most latency and tokens/s, checked against all the records by brute force."""

from __future__ import annotations

import math

import costmodel
from costmodel.attention.sweeps import Envelope, plan_sweep


def _records(n: int):
    hw = costmodel.load_profile("a100")
    ws = [costmodel.Workload.create(v, mode="incremental", batch=64) for v in ("mha", "mqa")]
    plan = plan_sweep(ws, hw, "context", f"1:{n}:1", max_points=n)
    return plan, [r for chunk in plan.chunks(size=997) for r in chunk]


def test_a_short_sweep_keeps_every_record():
    plan, every = _records(1500)
    env = Envelope(plan.values, plan.parameter)
    env.add(every)
    assert env.records() == every


def test_a_long_sweep_keeps_each_bins_extremes_and_the_memory_edge():
    plan, every = _records(30_000)
    env = Envelope(plan.values, plan.parameter, bins=500)
    for start in range(0, len(every), 4096):
        env.add(every[start : start + 4096])
    kept = env.records()
    assert len(kept) < len(every) / 8
    ids = {id(r) for r in kept}
    # brute force: every (variant, bin)'s least and most latency and tokens/s among all records is kept
    lo, width = math.log(1), math.log(30_000) / 500
    bins: dict = {}
    for r in every:
        b = min(int((math.log(r["context"]) - lo) / width), 499)
        bins.setdefault((r["variant"], b), []).append(r)
    for group in bins.values():
        for field in ("time_s", "tokens_per_s"):
            for pick in (min, max):
                target = pick(r[field] for r in group)
                assert any(id(r) in ids for r in group if r[field] == target)
    # the last record that fits and the first that does not, per variant, and the order of the swept value
    for variant in ("mha", "mqa"):
        mine = [r for r in every if r["variant"] == variant]
        fitting = [r for r in mine if r["fits"]]
        over = [r for r in mine if not r["fits"]]
        if fitting:
            assert id(fitting[-1]) in ids
        if over:
            assert id(over[0]) in ids
        xs = [r["context"] for r in kept if r["variant"] == variant]
        assert xs == sorted(xs)
