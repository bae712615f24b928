"""Capacity of a served model: the most clients (closed-loop concurrency), or the highest Poisson arrival rate
(open loop), an engine serves while the TTFT and TPOT (mean or p90) stay within their targets, the throughput
there, and what stops one more client or a higher rate.

TTFT and TPOT grow with the clients, so the search doubles the concurrency until a target fails and then
bisects. A rate is searched below the most the engine completes (:func:`costmodel.engine.steady.saturation`: arrivals at
or above it overload it, and its queue grows for as long as they come), bisecting to 1% of it. Means are searched
with the steady-state closed form (milliseconds per point) unless the simulation is asked for; percentiles need
the simulation. The point reported is priced by the evaluator that found it.
"""

from __future__ import annotations

from typing import Literal

from costmodel.core import checks
from costmodel.core.deadline import limited
from costmodel.core.errors import CostModelError
from costmodel.core.reports import Report
from costmodel.core.vocab import DEFAULTS
from costmodel.engine.load import REQUESTS_PER_CLIENT, Load
from costmodel.engine.reports import LoadPrediction
from costmodel.hardware.profile import HardwareProfile
from costmodel.model.presets import ModelPreset

LoadBinding = Literal["tpot", "ttft", "kv cache", "sequence limit", "concurrency limit", "saturation"]
#: A rate search stops when its bracket is this share of the engine's most.
RATE_PRECISION = 0.01

#: The most clients a search tries.
MAX_CONCURRENCY = 1 << 14


class LoadCapacityPoint(Report):
    device: str
    model: str
    attention: str
    concurrency: int | None  # 0: not even one client meets the targets; None: a search over the request rate
    request_rate: float | None = None  # a rate search's answer (0: not even the lowest rate tried meets them)
    binds: LoadBinding | None
    at: LoadPrediction | None
    cost_per_million_tokens: float | None


class LoadCapacityReport(Report):
    engine: str
    input_len: int
    output_len: int
    load: Literal["concurrency", "request-rate"] = "concurrency"
    statistic: Literal["mean", "p90"]
    evaluator: str
    tpot_target_s: float | None
    ttft_target_s: float | None
    price_per_hour: float | None
    points: list[LoadCapacityPoint]
    assumptions: list[str]
    stopped: str | None = None  # the search passed its time limit: each point the best found so far

    def __str__(self) -> str:
        from costmodel.render.serving import load_capacity_table

        return load_capacity_table(self)


def checked_targets(tpot_s, ttft_s, price_per_hour, statistic, evaluator, requests=None) -> str:
    for name, value, most in (
        ("tpot_s", tpot_s, 86400),
        ("ttft_s", ttft_s, 86400),
        ("price_per_hour", price_per_hour, 1e6),
    ):
        checks.number(name, value, most=most, optional=True)
    if statistic not in ("mean", "p90"):
        raise CostModelError(f"statistic must be mean or p90, got {statistic!r}")
    if tpot_s is None and ttft_s is None:
        raise CostModelError("a capacity under load needs a target: tpot_s, ttft_s or both")
    cached = requests is not None and requests.reuses_cache  # the prefix cache is simulated
    evaluator = evaluator or ("steady-state" if statistic == "mean" and not cached else "simulation")
    if statistic == "p90" and evaluator != "simulation":
        raise CostModelError("p90 targets need the simulation (the closed form gives means only)")
    return evaluator


def misses(p: LoadPrediction, statistic: str, tpot_s, ttft_s) -> LoadBinding | None:
    ttft = p.ttft.p90 if statistic == "p90" else p.ttft_s
    tpot = p.tpot.p90 if statistic == "p90" else p.tpot_s
    if tpot_s is not None and tpot > tpot_s:
        return "tpot"
    if ttft_s is not None and ttft > ttft_s:
        return "ttft"
    return None


def short_of(p, statistic: str, tpot_s, ttft_s) -> LoadBinding | None:
    """What keeps an open loop's prediction ``p`` from meeting the targets: "saturation" where the arrivals outpace
    what the engine completes, else the target it misses (:func:`misses`); None where it meets them."""
    return "saturation" if p.overloaded else misses(p, statistic, tpot_s, ttft_s)


def saturation(m, hw, requests: Load, **serving) -> float:
    """The most requests per second the engine completes serving ``requests``' lengths (the closed form's)."""
    from costmodel.engine.served import serve

    once = requests.with_(concurrency=None, request_rate=1.0, num_requests=1)
    return serve(m, hw, once, evaluator="steady-state", **serving).saturation_requests_per_s


def _cost(point: LoadPrediction | None, price_per_hour) -> float | None:
    if point is None or price_per_hour is None:
        return None
    return price_per_hour / 3600 / point.output_tokens_per_s_per_device * 1e6


def _out_of_time(deadline, what: str) -> bool:
    """Whether a search must stop at its deadline (noting it): its best so far is the answer."""
    if deadline is None or not deadline.passed():
        return False
    deadline.stopped = (
        f"stopped at the time limit ({deadline.seconds:g} s) before the {what} was narrowed down: each answer "
        "is the highest that met the targets when the search stopped, not the search's whole answer"
    )
    return True


def highest_rate(
    m: ModelPreset,
    hw: HardwareProfile,
    requests: Load,
    *,
    engine_name: str = DEFAULTS["engine"],
    tpot_s: float | None = None,
    ttft_s: float | None = None,
    statistic: str = "mean",
    evaluator: str | None = None,
    price_per_hour: float | None = None,
    deadline=None,
    **serving,
) -> LoadCapacityPoint:
    """The highest Poisson arrival rate (requests per second) meeting the targets (``statistic``: ``mean`` or
    ``p90`` of TTFT and TPOT), below the most the engine completes ("saturation" where nothing else binds first),
    to :data:`RATE_PRECISION` of it; ``requests``: their lengths (its rate the search's; its ``num_requests`` per
    simulated point, 1,000 when None); ``serving``: :func:`costmodel.engine.served.serve`'s other arguments."""
    from costmodel.engine.served import serve

    evaluator = checked_targets(tpot_s, ttft_s, price_per_hour, statistic, evaluator, requests)
    cache: dict[float, LoadPrediction] = {}

    def at(rate: float) -> LoadPrediction:
        if rate not in cache:
            load = requests.with_(concurrency=None, request_rate=rate, num_requests=requests.num_requests or 1000)
            cache[rate] = serve(m, hw, load, engine_name=engine_name, evaluator=evaluator, **serving)
        return cache[rate]

    def fails(rate: float) -> LoadBinding | None:
        return short_of(at(rate), statistic, tpot_s, ttft_s)

    most = saturation(m, hw, requests, engine_name=engine_name, **serving)
    lo, hi, binds = most * RATE_PRECISION, most, "saturation"
    first = fails(lo)
    if first is not None:
        best, binds = 0.0, first
    else:
        while hi - lo > RATE_PRECISION * most:
            if _out_of_time(deadline, "rate"):
                break
            mid = (lo + hi) / 2
            why = fails(mid)
            lo, hi, binds = (mid, hi, binds) if why is None else (lo, mid, why)
        best = lo
    point = at(best) if best else None
    return LoadCapacityPoint(
        device=hw.id,
        model=m.id,
        attention=m.attention_label,
        concurrency=None,
        request_rate=best,
        binds=binds,
        at=point,
        cost_per_million_tokens=_cost(point, price_per_hour),
    )


def largest_concurrency(
    m: ModelPreset,
    hw: HardwareProfile,
    requests: Load,
    *,
    engine_name: str = DEFAULTS["engine"],
    tpot_s: float | None = None,
    ttft_s: float | None = None,
    statistic: str = "mean",
    evaluator: str | None = None,
    price_per_hour: float | None = None,
    max_concurrency: int = MAX_CONCURRENCY,
    deadline=None,
    **serving,
) -> LoadCapacityPoint:
    """The most clients meeting the targets (``statistic``: ``mean`` or ``p90`` of TTFT and TPOT); ``requests``:
    their lengths (its clients the search's)."""
    from costmodel.engine.served import serve

    evaluator = checked_targets(tpot_s, ttft_s, price_per_hour, statistic, evaluator, requests)
    checks.count("max_concurrency", max_concurrency)
    cache: dict[int, LoadPrediction] = {}

    def at(c: int) -> LoadPrediction:
        if c not in cache:
            n = max(REQUESTS_PER_CLIENT * c, 64) if evaluator == "simulation" else None
            load = requests.with_(concurrency=c, request_rate=None, num_requests=n)
            cache[c] = serve(m, hw, load, engine_name=engine_name, evaluator=evaluator, **serving)
        return cache[c]

    def fails(c: int) -> LoadBinding | None:
        p = at(c)
        if p.max_batch < c:  # the engine never holds every client: the others only queue
            return "sequence limit" if p.engine.max_num_seqs < c else "kv cache"
        return misses(p, statistic, tpot_s, ttft_s)

    first = fails(1)
    if first is not None:
        best, binds = 0, first
    else:
        lo, hi, binds = 1, None, None
        while hi is None:
            if _out_of_time(deadline, "concurrency"):
                break
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
            if _out_of_time(deadline, "concurrency"):
                break
            mid = (lo + hi) // 2
            why = fails(mid)
            lo, hi, binds = (mid, hi, binds) if why is None else (lo, mid, why)
        best = lo
    point = at(best) if best else None
    return LoadCapacityPoint(
        device=hw.id,
        model=m.id,
        attention=m.attention_label,
        concurrency=best,
        binds=binds,
        at=point,
        cost_per_million_tokens=_cost(point, price_per_hour),
    )


def load_capacity(
    m: ModelPreset,
    devices: list[HardwareProfile],
    requests: Load,
    *,
    engine_name: str = DEFAULTS["engine"],
    tpot_s: float | None = None,
    ttft_s: float | None = None,
    statistic: str = "mean",
    evaluator: str | None = None,
    price_per_hour: float | None = None,
    variants: bool = True,
    load: str = "concurrency",
    time_limit: float | None = None,
    **serving,
) -> LoadCapacityReport:
    """:func:`largest_concurrency` (``load`` "concurrency") or :func:`highest_rate` (``load`` "request-rate") on
    every device, for the model and (``variants``) its MHA, GQA and MQA versions."""
    from costmodel.engine.served import NoRoomForOneRequest
    from costmodel.model.requests import with_variants

    checks.instance("model", m, ModelPreset, "a ModelPreset (load_model(...))")
    if not isinstance(devices, (list, tuple)) or not devices:
        raise CostModelError(f"devices must be a non-empty list of HardwareProfile, got {devices!r}"[:200])
    if load not in ("concurrency", "request-rate"):
        raise CostModelError(f"load must be concurrency or request-rate, got {load!r}")
    checks.flag("variants", variants)
    checks.instance("requests", requests, Load, "a Load(input_len, output_len): the requests' lengths")
    used = checked_targets(tpot_s, ttft_s, price_per_hour, statistic, evaluator)
    search = largest_concurrency if load == "concurrency" else highest_rate
    layouts = with_variants(m) if variants else [m]
    points = []
    deadline = limited(time_limit)
    for hw in devices:
        for layout in layouts:
            try:
                points.append(
                    search(
                        layout,
                        hw,
                        requests,
                        engine_name=engine_name,
                        tpot_s=tpot_s,
                        ttft_s=ttft_s,
                        statistic=statistic,
                        evaluator=evaluator,
                        price_per_hour=price_per_hour,
                        deadline=deadline,
                        **serving,
                    )
                )
            except NoRoomForOneRequest:
                points.append(
                    LoadCapacityPoint(
                        device=hw.id,
                        model=layout.id,
                        attention=layout.attention_label,
                        concurrency=0 if load == "concurrency" else None,
                        request_rate=0.0 if load == "request-rate" else None,
                        binds="kv cache",
                        at=None,
                        cost_per_million_tokens=None,
                    )
                )
    assumptions = _capacity_assumptions(engine_name, statistic, load, used, price_per_hour)
    assumptions = [deadline.stopped, *assumptions] if deadline.stopped else assumptions
    return LoadCapacityReport(
        stopped=deadline.stopped,
        engine=engine_name,
        input_len=requests.input_len,
        output_len=requests.output_len,
        load=load,
        statistic=statistic,
        evaluator=used,
        tpot_target_s=tpot_s,
        ttft_target_s=ttft_s,
        price_per_hour=price_per_hour,
        points=points,
        assumptions=assumptions,
    )


def _capacity_assumptions(engine_name: str, statistic: str, load: str, used: str, price_per_hour) -> list[str]:
    """How a capacity under load was searched and evaluated, in words."""
    searched = (
        f"continuous batching in {engine_name} (costmodel predict --engine): the most closed-loop clients whose "
        f"{statistic} TTFT and TPOT meet the targets and that the engine runs all at once; 'binds' is what fails "
        "with one more client (kv cache or sequence limit: the engine cannot hold every client, and more clients "
        "only queue)"
        if load == "concurrency"
        else f"continuous batching in {engine_name} (costmodel predict --engine): the highest Poisson arrival rate whose "
        f"{statistic} TTFT and TPOT meet the targets, to {RATE_PRECISION:.0%} of the most the engine completes with "
        "every sequence it holds running; 'binds' is what fails at a higher rate (saturation: the arrivals reach that "
        "most, and the queue grows for as long as they come)"
    )
    how = (
        " (means only"
        + (
            "; an arrival's wait for the iteration it lands in and its prompt's queue in closed "
            "form, within 10% of the simulation up to 80% of saturation, lower than it nearer)"
            if load == "request-rate"
            else ")"
        )
        if used == "steady-state"
        else " (10 requests per client, at least 64, the first wave included)"
        if load == "concurrency"
        else " (1,000 requests per rate)"
    )
    assumptions = [
        searched,
        f"evaluated by the {used}{how}",
        "throughput per device: output tokens per second over the run / devices"
        + (
            "; cost per million output tokens = price per device-hour x 1e6 / 3600 / throughput per device"
            if price_per_hour is not None
            else ""
        ),
    ]
    return assumptions
