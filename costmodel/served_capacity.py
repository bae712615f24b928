"""Capacity of a served model: the most clients (closed-loop concurrency) an engine serves while the TTFT and
TPOT (mean or p90) stay within their targets, the throughput there, and what stops one more client.

TTFT and TPOT grow with the clients, so the search doubles the concurrency until a target fails and then
bisects. Means are searched with the steady-state closed form (milliseconds per point) unless the simulation
is asked for; percentiles need the simulation. The point reported is priced by the evaluator that found it.
"""

from __future__ import annotations

from typing import Literal

from costmodel import checks
from costmodel.errors import CostModelError
from costmodel.hardware import HardwareProfile
from costmodel.load_reports import LoadPrediction
from costmodel.presets import ModelPreset
from costmodel.reports import Report

LoadBinding = Literal["tpot", "ttft", "kv cache", "sequence limit", "concurrency limit"]

#: The most clients a search tries.
MAX_CONCURRENCY = 1 << 14


class LoadCapacityPoint(Report):
    device: str
    model: str
    attention: str
    concurrency: int  # 0: not even one client meets the targets
    binds: LoadBinding | None
    at: LoadPrediction | None
    cost_per_million_tokens: float | None


class LoadCapacityReport(Report):
    engine: str
    input_len: int
    output_len: int
    statistic: Literal["mean", "p90"]
    evaluator: str
    tpot_target_s: float | None
    ttft_target_s: float | None
    price_per_hour: float | None
    points: list[LoadCapacityPoint]
    assumptions: list[str]

    def __str__(self) -> str:
        from costmodel.text_serving import load_capacity_table

        return load_capacity_table(self)


def largest_concurrency(m: ModelPreset, hw: HardwareProfile, *, input_len: int, output_len: int,
                        engine_name: str = "vllm", tpot_s: float | None = None, ttft_s: float | None = None,
                        statistic: str = "mean", evaluator: str | None = None, price_per_hour: float | None = None,
                        max_concurrency: int = MAX_CONCURRENCY, **serving) -> LoadCapacityPoint:
    """The most clients meeting the targets (``statistic``: ``mean`` or ``p90`` of TTFT and TPOT)."""
    from costmodel.served import REQUESTS_PER_CLIENT, serve

    for name, value, most in (("tpot_s", tpot_s, 86400), ("ttft_s", ttft_s, 86400),
                              ("price_per_hour", price_per_hour, 1e6)):
        checks.number(name, value, most=most, optional=True)
    if statistic not in ("mean", "p90"):
        raise CostModelError(f"statistic must be mean or p90, got {statistic!r}")
    if tpot_s is None and ttft_s is None:
        raise CostModelError("a capacity under load needs a target: tpot_s, ttft_s or both")
    checks.count("max_concurrency", max_concurrency)
    evaluator = evaluator or ("steady-state" if statistic == "mean" else "simulation")
    if statistic == "p90" and evaluator != "simulation":
        raise CostModelError("p90 targets need the simulation (the closed form gives means only)")
    cache: dict[int, LoadPrediction] = {}

    def at(c: int) -> LoadPrediction:
        if c not in cache:
            n = max(REQUESTS_PER_CLIENT * c, 64) if evaluator == "simulation" else None
            cache[c] = serve(m, hw, input_len=input_len, output_len=output_len, engine_name=engine_name,
                             concurrency=c, num_requests=n, evaluator=evaluator, **serving)
        return cache[c]

    def fails(c: int) -> LoadBinding | None:
        p = at(c)
        if p.max_batch < c:  # the engine never holds every client: the others only queue
            return "sequence limit" if p.engine.max_num_seqs < c else "kv cache"
        ttft = p.ttft.p90 if statistic == "p90" else p.ttft_s
        tpot = p.tpot.p90 if statistic == "p90" else p.tpot_s
        if tpot_s is not None and tpot > tpot_s:
            return "tpot"
        if ttft_s is not None and ttft > ttft_s:
            return "ttft"
        return None

    first = fails(1)
    if first is not None:
        best, binds = 0, first
    else:
        lo, hi, binds = 1, None, None
        while hi is None:
            nxt = min(lo * 2, max_concurrency)
            if nxt == lo:
                binds = "concurrency limit"
                break
            why = fails(nxt)
            if why is None:
                lo = nxt
            else:
                hi, binds = nxt, why
        while hi is not None and hi - lo > 1:
            mid = (lo + hi) // 2
            why = fails(mid)
            lo, hi, binds = (mid, hi, binds) if why is None else (lo, mid, why)
        best = lo
    point = at(best) if best else None
    cost = None
    if point is not None and price_per_hour is not None:
        cost = price_per_hour / 3600 / point.output_tokens_per_s_per_device * 1e6
    return LoadCapacityPoint(device=hw.id, model=m.id, attention=m.attention_label, concurrency=best, binds=binds,
                             at=point, cost_per_million_tokens=cost)


def load_capacity(m: ModelPreset, devices: list[HardwareProfile], *, input_len: int, output_len: int,
                  engine_name: str = "vllm", tpot_s: float | None = None, ttft_s: float | None = None,
                  statistic: str = "mean", evaluator: str | None = None, price_per_hour: float | None = None,
                  variants: bool = True, **serving) -> LoadCapacityReport:
    """:func:`largest_concurrency` on every device, for the model and (``variants``) its MHA, GQA and MQA
    versions."""
    from costmodel.served import NoRoomForOneRequest
    from costmodel.serving import with_variants

    checks.instance("model", m, ModelPreset, "a ModelPreset (load_model(...))")
    if not isinstance(devices, (list, tuple)) or not devices:
        raise CostModelError(f"devices must be a non-empty list of HardwareProfile, got {devices!r}"[:200])
    layouts = with_variants(m) if variants else [m]
    points = []
    for hw in devices:
        for layout in layouts:
            try:
                points.append(largest_concurrency(layout, hw, input_len=input_len, output_len=output_len,
                                                  engine_name=engine_name, tpot_s=tpot_s, ttft_s=ttft_s,
                                                  statistic=statistic, evaluator=evaluator,
                                                  price_per_hour=price_per_hour, **serving))
            except NoRoomForOneRequest:
                points.append(LoadCapacityPoint(device=hw.id, model=layout.id, attention=layout.attention_label,
                                                concurrency=0, binds="kv cache", at=None,
                                                cost_per_million_tokens=None))
    used = evaluator or ("steady-state" if statistic == "mean" else "simulation")
    assumptions = [
        f"continuous batching in {engine_name} (costmodel predict --engine): the most closed-loop clients whose "
        f"{statistic} TTFT and TPOT meet the targets and that the engine runs all at once; 'binds' is what fails "
        "with one more client (kv cache or sequence limit: the engine cannot hold every client, and more clients "
        "only queue)",
        f"evaluated by the {used}" + (" (means only)" if used == "steady-state" else
                                      " (10 requests per client, at least 64, the first wave included)"),
        "throughput per device: output tokens per second over the run / devices"
        + ("; cost per million output tokens = price per device-hour x 1e6 / 3600 / throughput per device"
           if price_per_hour is not None else ""),
    ]
    return LoadCapacityReport(engine=engine_name, input_len=input_len, output_len=output_len, statistic=statistic,
                              evaluator=used, tpot_target_s=tpot_s, ttft_target_s=ttft_s,
                              price_per_hour=price_per_hour, points=points, assumptions=assumptions)
