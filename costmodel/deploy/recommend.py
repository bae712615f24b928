"""The fewest GPUs that serve a load under latency targets: for each device kind and each engine unit (tensor
parallel, expert parallel, attention data parallel, pipeline stages) the most one unit serves under the targets
(:func:`costmodel.deploy.capacity.highest_rate` or :func:`~costmodel.deploy.capacity.largest_concurrency`), then as
many replicas as the load needs; the fewest GPUs wins, then the cheaper, then the one with more room. The answer is
priced again as a whole (every replica its share of the load) and carries the ``costmodel predict`` arguments that
reprice it, the engine's launch command and the benchmark command that would measure it.
"""

from __future__ import annotations

import math
from dataclasses import replace

from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.core.progress import bar
from costmodel.core.reports import Report
from costmodel.core.vocab import DEFAULTS
from costmodel.deploy.capacity import checked_targets, highest_rate, largest_concurrency, misses
from costmodel.deploy.launch import commands_for
from costmodel.engine.config import EngineFlags
from costmodel.engine.layout import Layout
from costmodel.engine.load import Load
from costmodel.engine.reports import LoadPrediction
from costmodel.engine.served import NoRoomForOneRequest, serve
from costmodel.hardware.profile import HardwareProfile
from costmodel.model.presets import ModelPreset

#: The most GPUs a recommendation searches unless told otherwise.
MAX_GPUS = 64
#: Tensor-parallel sizes of one engine (powers of two within a scale-up domain of 8).
TP_SIZES = (1, 2, 4, 8)


class Candidate(Report):
    """One engine unit on one device kind: the most it serves under the targets, and the replicas the load needs."""

    gpu: str
    layout: str
    unit_gpus: int
    tp: int
    expert_parallel: bool
    attention_dp: int
    pipeline_parallel: int
    per_unit: float | None  # requests/s (an open loop) or clients (a closed loop) one unit serves; None: none
    binds: str | None
    replicas: int | None
    gpus: int | None
    cost_per_hour: float | None = None


class Recommendation(Report):
    """The fewest GPUs (and the layout) that serve the load under the targets, with how to launch and measure it."""

    model: str
    model_name: str
    engine: str
    gpu: str
    gpus: int
    layout: str
    replicas: int
    tp: int
    expert_parallel: bool
    attention_dp: int
    pipeline_parallel: int
    input_len: int
    output_len: int
    concurrency: int | None
    request_rate: float | None
    ttft_target_s: float | None
    tpot_target_s: float | None
    statistic: str
    evaluator: str
    price_per_gpu_hour: float | None
    cost_per_hour: float | None
    at: LoadPrediction
    command: list[str] | None = None  # the costmodel predict arguments that reprice it (the command line's)
    launch: str
    bench: str
    candidates: list[Candidate]
    assumptions: list[str]

    def __str__(self) -> str:
        from costmodel.render.serving import recommendation_table

        return recommendation_table(self)


def units(m: ModelPreset, max_gpus: int) -> list[Layout]:
    """The engine units searched: tensor parallel over 1-8 GPUs, for a mixture of experts also expert parallel and
    attention data parallel groups, and pipeline stages of eight for a model past one node."""
    out = []
    for tp in TP_SIZES:
        out.append(Layout(tp=tp))
        if m.moe and tp > 1:
            out.append(Layout(tp=tp, expert_parallel=True))
        if m.moe and tp == 1:
            out += [Layout(tp=1, attention_dp=dp, expert_parallel=True) for dp in (2, 4, 8)]
    out += [Layout(tp=8, pipeline_parallel=pp) for pp in (2, 4)]
    return [u for u in out if u.devices <= max_gpus]


def _per_unit(m, hw, unit: Layout, requests: Load, closed: bool, targets: dict, kw: dict):
    """(what one unit serves under the targets, what binds it) or (None, why not)."""
    try:
        if closed:
            pt = largest_concurrency(m, hw, requests, layout=unit, **targets, **kw)
            return (pt.concurrency or None), pt.binds
        pt = highest_rate(m, hw, requests, layout=unit, **targets, **kw)
        return (pt.request_rate or None), pt.binds
    except NoRoomForOneRequest:
        return None, "kv cache"
    except CostModelError as err:  # a layout the model cannot take (heads, experts, memory)
        return None, str(err).split(";")[0][:120]


def _replicas(load: float, per_unit: float, closed: bool) -> int:
    """Replicas that serve ``load``: enough for the load, and for clients a count that shares them evenly."""
    r = max(1, math.ceil(load / per_unit - 1e-9))
    while closed and load % r:
        r += 1
    return r


def recommend(
    m: ModelPreset,
    hws: list[HardwareProfile],
    requests: Load,
    *,
    engine_name: str = DEFAULTS["engine"],
    flags: EngineFlags = EngineFlags(),
    ttft_s: float | None = None,
    tpot_s: float | None = None,
    statistic: str = "mean",
    evaluator: str | None = None,
    price_per_gpu_hour: float | None = None,
    max_gpus: int = MAX_GPUS,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
) -> Recommendation:
    """The fewest GPUs of ``hws`` that serve ``requests`` (its ``concurrency`` clients or ``request_rate``) under
    the TTFT and TPOT targets (``statistic``: their ``mean`` or ``p90``), at most ``max_gpus``."""
    if not isinstance(hws, (list, tuple)) or not hws:
        raise CostModelError(f"hws must be a non-empty list of HardwareProfile, got {hws!r}"[:200])
    checks.instance("requests", requests, Load, "a Load(input_len, output_len, request_rate=...)")
    if (requests.concurrency is None) == (requests.request_rate is None):
        raise CostModelError("give the load to serve: a concurrency (clients) or a request rate, one of them")
    checks.count("max_gpus", max_gpus, most=1024)
    used = checked_targets(tpot_s, ttft_s, price_per_gpu_hour, statistic, evaluator)
    closed = requests.concurrency is not None
    load = requests.concurrency if closed else requests.request_rate
    targets = dict(tpot_s=tpot_s, ttft_s=ttft_s, statistic=statistic, evaluator=used)
    kw = dict(engine_name=engine_name, flags=flags, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    for hw in hws:
        checks.instance("hws", hw, HardwareProfile, "a HardwareProfile (load_profile(...))")
    searched = [(hw, unit) for hw in hws for unit in units(m, max_gpus)]
    with bar(len(searched), "engine units") as advance:
        candidates = [
            _candidate(m, hw, unit, requests, closed, load, targets, kw, price_per_gpu_hour, max_gpus, advance)
            for hw, unit in searched
        ]
    return _choose(m, hws, requests, candidates, targets, kw, price_per_gpu_hour, max_gpus)


def _candidate(m, hw, unit, requests, closed, load, targets, kw, price_per_gpu_hour, max_gpus, advance) -> Candidate:
    """One engine unit on one device kind: what it serves, and the replicas and GPUs the load needs."""
    per, binds = _per_unit(m, hw, unit, requests.with_(concurrency=None, request_rate=None), closed, targets, kw)
    r = _replicas(load, per, closed) if per else None
    gpus = unit.devices * r if r else None
    if gpus is not None and gpus > max_gpus:
        r = gpus = None
    cost = gpus * price_per_gpu_hour if gpus and price_per_gpu_hour is not None else None
    advance()
    return Candidate(
        gpu=hw.id,
        layout=unit.describe(),
        unit_gpus=unit.devices,
        tp=unit.tp,
        expert_parallel=unit.expert_parallel,
        attention_dp=unit.attention_dp,
        pipeline_parallel=unit.pipeline_parallel,
        per_unit=per,
        binds=binds,
        replicas=r,
        gpus=gpus,
        cost_per_hour=cost,
    )


def _choose(m, hws, requests, candidates, targets, kw, price, max_gpus) -> Recommendation:
    """The fewest GPUs among the candidates (then the cheaper, then more room), priced again as a whole: where the
    whole misses the targets at the search's edge, one replica more."""
    closed = requests.concurrency is not None
    load = requests.concurrency if closed else requests.request_rate
    feasible = [c for c in candidates if c.gpus is not None]
    if not feasible:
        why = sorted({f"{c.gpu} {c.layout}: {c.binds}" for c in candidates})[:6]
        raise CostModelError(
            f"no layout of {m.id} on at most {max_gpus} GPUs of {', '.join(h.id for h in hws)} serves "
            f"{load:g} {'clients' if closed else 'requests/s'} under the targets ({'; '.join(why)})"
        )
    best = min(feasible, key=lambda c: (c.gpus, c.cost_per_hour or 0.0, -(c.per_unit * c.replicas - load)))
    hw = next(h for h in hws if h.id == best.gpu)
    unit = Layout(
        tp=best.tp,
        expert_parallel=best.expert_parallel,
        attention_dp=best.attention_dp,
        pipeline_parallel=best.pipeline_parallel,
    )
    replicas = best.replicas
    for _ in range(4):
        layout = replace(unit, replicas=replicas)
        at = serve(m, hw, requests, layout=layout, evaluator=targets["evaluator"], **kw)
        if not at.overloaded and misses(at, targets["statistic"], targets["tpot_s"], targets["ttft_s"]) is None:
            break
        replicas += 1
        while closed and load % replicas:
            replicas += 1
    else:
        raise CostModelError(f"{best.gpu} {best.layout} misses the targets as a whole at {load:g}; raise max_gpus")
    best = best.model_copy(update={"replicas": replicas, "gpus": unit.devices * replicas})
    return _recommendation(m, hw, requests, unit, best, at, candidates, targets, kw, price)


def _recommendation(m, hw, requests, unit, best, at, candidates, targets, kw, price) -> Recommendation:
    """The answer with the commands that reprice, launch and measure it."""
    engine_name = kw["engine_name"]
    closed = requests.concurrency is not None
    share = (
        dict(concurrency=requests.concurrency // best.replicas)
        if closed
        else dict(request_rate=requests.request_rate / best.replicas)
    )
    made = commands_for(
        m, hw, unit, at, kw["flags"], kw["weight_dtype"], kw["kv_dtype"], share | {"num_requests": at.num_requests}
    )
    return Recommendation(
        model=m.id,
        model_name=m.name,
        engine=engine_name,
        gpu=hw.id,
        gpus=best.gpus,
        layout=best.layout,
        replicas=best.replicas,
        tp=unit.tp,
        expert_parallel=unit.expert_parallel,
        attention_dp=unit.attention_dp,
        pipeline_parallel=unit.pipeline_parallel,
        input_len=requests.input_len,
        output_len=requests.output_len,
        concurrency=requests.concurrency,
        request_rate=requests.request_rate,
        ttft_target_s=targets["ttft_s"],
        tpot_target_s=targets["tpot_s"],
        statistic=targets["statistic"],
        evaluator=targets["evaluator"],
        price_per_gpu_hour=price,
        cost_per_hour=best.gpus * price if price is not None else None,
        at=at,
        launch=made["launch"],
        bench=made["bench"],
        candidates=candidates,
        assumptions=_assumptions(best, closed),
    )


def _assumptions(best: Candidate, closed: bool) -> list[str]:
    return [
        "searched: per device kind, engine units of tensor parallel 1-8 GPUs (a mixture of experts also expert "
        "parallel and attention data parallel groups; pipeline stages of 8 past one node), the most one unit "
        f"serves under the targets ({'clients' if closed else 'requests/s'}, costmodel capacity), then replicas "
        "behind a router, each an even share of the load; the fewest GPUs, then the cheaper, then the most room",
        f"the answer priced again as a whole ({best.replicas} replica(s)): `command` reprices it",
        "launch: one replica's command as the engine spells its flags (costmodel.deploy.launch); "
        f"{best.replicas} such launches behind a router; bench: vllm bench serve at one replica's share",
        "not searched yet: disaggregated pools and engine settings (give them as flags)",
    ]
