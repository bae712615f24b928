"""The fewest GPUs that serve a load under latency targets: for each device kind, each engine unit (tensor
parallel, expert parallel, attention data parallel, pipeline stages) and each token budget the fewest replicas
that serve the load under the targets, each priced on its even share (searched over whole replicas upward from
what the closed form's saturation allows, so one replica fewer is priced and misses); for a request rate
also disaggregated pools, sized in closed form (:mod:`costmodel.deploy.recommend_disagg`). The fewest GPUs wins (or,
by the objective, the cheapest per hour or the fewest joules per output token: :mod:`costmodel.deploy.objectives`),
then the cheaper, then the one with more room. The answer is priced again as a whole (every replica its share of the
load; disaggregated pools simulated, grown where they miss and trimmed while a worker fewer meets the targets) and
carries the ``costmodel predict`` arguments that reprice it, the engine's launch commands and the benchmark command
that would measure it.
"""

from __future__ import annotations

import math
from dataclasses import replace

from costmodel.core import checks
from costmodel.core.deadline import limited
from costmodel.core.errors import CostModelError
from costmodel.core.progress import bar
from costmodel.core.vocab import DEFAULTS
from costmodel.deploy import recommend_disagg
from costmodel.deploy.capacity import checked_targets, saturation, short_of
from costmodel.deploy.launch import commands_for, pool_commands
from costmodel.deploy.objectives import checked_prices, fewest, price_of, priced, rank
from costmodel.deploy.recommend_reports import Candidate, Recommendation
from costmodel.engine.config import EngineFlags, engine
from costmodel.engine.layout import Layout
from costmodel.engine.load import Load
from costmodel.engine.served import NoRoomForOneRequest, serve
from costmodel.hardware.profile import HardwareProfile
from costmodel.model.presets import ModelPreset

#: The most GPUs a recommendation searches unless told otherwise.
MAX_GPUS = 64
#: Tensor-parallel sizes of one engine (powers of two within a scale-up domain of 8).
TP_SIZES = (1, 2, 4, 8)
#: Token budgets searched beside the engine's default where none is given: vLLM's defaults by device (2048 and
#: 8192, vllm/engine/arg_utils.py) and the 16384 of its offline LLM class on a large device. A smaller budget
#: lets fewer prompt tokens ride with the decodes of an iteration (a shorter TPOT, a longer TTFT); a larger one
#: the opposite.
BUDGETS = (2048, 8192, 16384)
#: How far past the fewest aggregated GPUs a disaggregated candidate is still priced whole (its closed-form sizing
#: errs toward workers the trim takes back), and how many such candidates are.
DISAGG_REACH, DISAGG_TRIED = 1.5, 3
#: The units the other token budgets are tried on: those within this many times the fewest GPUs the engine's
#: default budget reached, and those a latency target held back (a budget moves TTFT against TPOT; it seldom
#: halves the GPUs a unit needs).
BUDGET_REACH = 2.0


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


def _replicas_needed(m, hw, unit: Layout, requests: Load, load: float, targets: dict, kw: dict, most_units: int):
    """(the fewest replicas of ``unit`` that serve ``load`` under the targets, each priced on its even share, what
    misses with one fewer, the most requests/s one unit completes, the joules per output token at that share) or
    (None, why none within ``most_units``, ..., None).
    Searched over whole replicas, upward from what the closed form's saturation allows (a replica more at a time,
    then doubling, then halving the gap)."""
    closed = requests.concurrency is not None
    counts = [r for r in range(1, most_units + 1) if not closed or load % r == 0]
    if not counts:
        return None, f"needs more than {most_units} units", None, None
    cache: dict[int, str | None] = {}
    energy: dict[int, float | None] = {}

    def fails(r: int) -> str | None:
        if r not in cache:
            share = (
                requests.with_(concurrency=load // r)
                if closed
                else requests.with_(request_rate=load / r, num_requests=requests.num_requests or 1000)
            )
            try:
                p = serve(m, hw, share, layout=unit, evaluator=targets["evaluator"], **kw)
            except NoRoomForOneRequest:
                cache[r] = "kv cache"
            except CostModelError as err:  # a layout the model cannot take (heads, experts, memory)
                cache[r] = str(err).split(";")[0][:120]
            else:
                cache[r] = short_of(p, targets["statistic"], targets["tpot_s"], targets["ttft_s"])
                energy[r] = p.energy_j_per_output_token
        return cache[r]

    most = None if closed else _saturation(m, hw, unit, requests, kw)
    if most == 0.0:
        return None, fails(counts[-1]), None, None
    start = 0 if most is None else next((i for i, r in enumerate(counts) if load / r <= most), len(counts) - 1)
    lo, hi, step = start - 1, start, 1  # counts[lo] fails (or lo is -1), counts[hi] to try
    while fails(counts[hi]) is not None:
        if hi == len(counts) - 1:
            return None, fails(counts[hi]), most, None
        lo, hi, step = hi, min(hi + step, len(counts) - 1), step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fails(counts[mid]) is None else (mid, hi)
    return counts[hi], (fails(counts[lo]) if lo >= 0 else None), most, energy.get(counts[hi])


def _saturation(m, hw, unit: Layout, requests: Load, kw: dict) -> float:
    """The most requests per second one unit completes (the closed form's), 0 where it cannot hold a request."""
    try:
        return saturation(m, hw, requests, layout=unit, **kw)
    except CostModelError:
        return 0.0


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
    price_per_gpu_hour: float | dict[str, float] | None = None,
    minimise: str = "gpus",
    max_gpus: int = MAX_GPUS,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    time_limit: float | None = None,
    frontend: str = "dynamo",
) -> Recommendation:
    """The fewest GPUs of ``hws`` that serve ``requests`` (its ``concurrency`` clients or ``request_rate``) under
    the TTFT and TPOT targets (``statistic``: their ``mean`` or ``p90``), at most ``max_gpus``; with ``minimise``
    "energy" the layout that spends the fewest joules per output token, with "cost" the cheapest per hour at
    ``price_per_gpu_hour`` (one price for every device kind, or a price per kind: profile id -> $ per GPU-hour).
    Past ``time_limit`` seconds the search takes no new layout and answers the best found so far, saying so."""
    if not isinstance(hws, (list, tuple)) or not hws:
        raise CostModelError(f"hws must be a non-empty list of HardwareProfile, got {hws!r}"[:200])
    checks.instance("requests", requests, Load, "a Load(input_len, output_len, request_rate=...)")
    if (requests.concurrency is None) == (requests.request_rate is None):
        raise CostModelError("give the load to serve: a concurrency (clients) or a request rate, one of them")
    checks.count("max_gpus", max_gpus, most=1024)
    if requests.reuses_cache:
        raise CostModelError(
            "recommend sizes its replicas from the engine's closed form, which has no prefix cache: price a shared "
            "prefix or conversations with predict, plan or capacity"
        )
    for hw in hws:
        checks.instance("hws", hw, HardwareProfile, "a HardwareProfile (load_profile(...))")
    price_per_gpu_hour = checked_prices(price_per_gpu_hour, hws, minimise)
    used = checked_targets(tpot_s, ttft_s, None, statistic, evaluator)
    closed = requests.concurrency is not None
    load = requests.concurrency if closed else requests.request_rate
    targets = dict(tpot_s=tpot_s, ttft_s=ttft_s, statistic=statistic, evaluator=used, minimise=minimise)
    kw = dict(engine_name=engine_name, flags=flags, weight_dtype=weight_dtype, kv_dtype=kv_dtype, frontend=frontend)
    pooled = recommend_disagg.searched(engine_name, requests) is None
    first = [(hw, unit, None) for hw in hws for unit in units(m, max_gpus)]
    common = (m, requests, closed, load, targets, kw, price_per_gpu_hour, max_gpus)
    deadline = limited(time_limit)
    with bar(len(first) + (len(hws) if pooled else 0), "layouts") as advance:
        priced = _searched(first, common, advance, deadline)
        candidates = [c for c in priced if c is not None]
        for hw in hws if pooled and not deadline.passed() else ():
            candidates += recommend_disagg.candidates(
                m, hw, requests, TP_SIZES, targets, kw, max_gpus, price_of(price_per_gpu_hour, hw.id)
            )
            advance()
        # the other token budgets, for the units within reach of the fewest GPUs so far or held back by a target
        fewest = min((c.gpus for c in candidates if c.gpus is not None), default=max_gpus)
        near = [
            (hw, unit)
            for (hw, unit, _), c in zip(first, priced)
            if c is not None
            and ((c.gpus or math.inf) <= BUDGET_REACH * fewest or (c.binds or "").startswith(("tpot", "ttft")))
        ]
        more = [(hw, unit, budget) for hw, unit in near for budget in _budgets(hw, unit, kw)[1:]]
        if not deadline.passed():
            candidates += [c for c in _searched(more, common, advance, deadline) if c is not None]
    total = len(first) + len(more) + (len(hws) * len(TP_SIZES) ** 2 if pooled else 0)
    if deadline.stopped is not None or len(candidates) < total:
        deadline.stop(len(candidates), total, "layouts")
    return _choose(m, hws, requests, candidates, targets, kw, price_per_gpu_hour, max_gpus, deadline)


def _searched(searched: list, common: tuple, advance, deadline) -> list[Candidate | None]:
    """Each (device, unit, token budget) of ``searched`` priced (:func:`_candidate`), over every core; None for
    those the deadline left out."""
    from costmodel.core.parallel import run_all, workers_for

    return run_all(
        _candidate_task,
        [(hw, unit, budget, common) for hw, unit, budget in searched],
        workers_for(len(searched), 4),
        lambda _: advance(),
        deadline=deadline,
    )


def _candidate_task(task) -> Candidate:
    hw, unit, budget, (m, requests, closed, load, targets, kw, price, max_gpus) = task
    return _candidate(m, hw, unit, budget, requests, closed, load, targets, kw, price, max_gpus)


def _budgets(hw: HardwareProfile, unit: Layout, kw: dict) -> list[int | None]:
    """The token budgets searched for ``unit``: the engine's default (None) and :data:`BUDGETS`, or the one given."""
    if kw["flags"].max_num_batched_tokens is not None:
        return [None]
    default = engine(
        kw["engine_name"],
        capacity_bytes=hw.engine_memory,
        device_name=hw.name,
        tp=unit.tp,
        version=kw["flags"].engine_version,
    ).max_num_batched_tokens
    return [None, *(b for b in BUDGETS if b != default)]


def _candidate(m, hw, unit, budget, requests, closed, load, targets, kw, price_per_gpu_hour, max_gpus) -> Candidate:
    """One engine unit on one device kind at token budget ``budget`` (None: the default or the flag): what it
    serves, and the replicas and GPUs the load needs."""
    kw = _with_budget(kw, budget)
    r, binds, most, joules = _replicas_needed(m, hw, unit, requests, load, targets, kw, max_gpus // unit.devices)
    per = load / r if r else None  # what one unit was shown to serve: its share of the load
    gpus = unit.devices * r if r else None
    cost = gpus * price_of(price_per_gpu_hour, hw.id) if gpus and price_per_gpu_hour is not None else None
    return Candidate(
        gpu=hw.id,
        layout=unit.describe(),
        max_num_batched_tokens=budget,
        unit_gpus=unit.devices,
        tp=unit.tp,
        expert_parallel=unit.expert_parallel,
        attention_dp=unit.attention_dp,
        pipeline_parallel=unit.pipeline_parallel,
        per_unit=per,
        saturation=most,
        binds=binds,
        replicas=r,
        gpus=gpus,
        cost_per_hour=cost,
        energy_j_per_output_token=joules,
    )


def _with_budget(kw: dict, budget: int | None) -> dict:
    return kw if budget is None else kw | {"flags": replace(kw["flags"], max_num_batched_tokens=budget)}


def _choose(m, hws, requests, candidates, targets, kw, price, max_gpus, deadline) -> Recommendation:
    """The best candidate by the objective (the fewest GPUs unless told otherwise), each priced again as a whole: an aggregated one with a replica more
    where the whole misses the targets at the search's edge; the disaggregated ones within reach of it grown and
    trimmed (:func:`costmodel.deploy.recommend_disagg.verified`)."""
    closed = requests.concurrency is not None
    load = requests.concurrency if closed else requests.request_rate
    minimise = targets["minimise"]
    feasible = sorted((c for c in candidates if c.gpus is not None), key=lambda c: rank(c, load, minimise))
    answer = None
    for c in (c for c in feasible if c.mode == "agg"):
        answer = _whole(m, hws, requests, c, targets, kw, max_gpus, price)
        if answer is not None:
            break
    bound = answer[0].gpus if answer is not None else max_gpus
    pools = sorted((c for c in feasible if c.mode == "disagg" and c.gpus <= DISAGG_REACH * bound), key=fewest)
    for c in pools[:DISAGG_TRIED] if not deadline.passed() else ():
        hw = next(h for h in hws if h.id == c.gpu)
        best, at = recommend_disagg.verified(m, hw, requests, c, targets, kw, max_gpus)
        if best is not None:
            best = priced(best, at, price)
        if best is not None and (answer is None or rank(best, load, minimise) < rank(answer[0], load, minimise)):
            answer = (best, at, hw)
    if answer is None:
        why = sorted({f"{c.gpu} {c.layout}: {c.binds}" for c in candidates})[:6]
        raise CostModelError(
            f"no layout of {m.id} on at most {max_gpus} GPUs of {', '.join(h.id for h in hws)} serves "
            f"{load:g} {'clients' if closed else 'requests/s'} under the targets ({'; '.join(why)})"
        )
    best, at, hw = answer
    rec = _recommendation(m, hw, requests, best, at, candidates, targets, kw, price)
    if deadline.stopped is not None:
        rec = rec.model_copy(update={"stopped": deadline.stopped, "assumptions": [deadline.stopped, *rec.assumptions]})
    return rec


def _whole(m, hws, requests, best: Candidate, targets, kw, max_gpus, price):
    """(the aggregated candidate with the replicas that meet the targets as a whole, its prediction, its device),
    a replica more at a time (up to four) where the whole misses them; None where it still misses."""
    closed = requests.concurrency is not None
    load = requests.concurrency if closed else requests.request_rate
    hw = next(h for h in hws if h.id == best.gpu)
    unit = _unit(best)
    replicas = best.replicas
    for _ in range(4):
        if unit.devices * replicas > max_gpus:
            return None
        layout = replace(unit, replicas=replicas)
        at = serve(
            m,
            hw,
            requests,
            layout=layout,
            evaluator=targets["evaluator"],
            **_with_budget(kw, best.max_num_batched_tokens),
        )
        if short_of(at, targets["statistic"], targets["tpot_s"], targets["ttft_s"]) is None:
            return priced(best.model_copy(update={"replicas": replicas}), at, price), at, hw
        replicas += 1
        while closed and load % replicas:
            replicas += 1
    return None


def _unit(c: Candidate) -> Layout:
    return Layout(
        tp=c.tp, expert_parallel=c.expert_parallel, attention_dp=c.attention_dp, pipeline_parallel=c.pipeline_parallel
    )


def _recommendation(m, hw, requests, best: Candidate, at, candidates, targets, kw, price) -> Recommendation:
    """The answer with the commands that reprice, launch and measure it."""
    closed = requests.concurrency is not None
    kw = _with_budget(kw, best.max_num_batched_tokens)
    if best.mode == "agg":
        share = (
            dict(concurrency=requests.concurrency // best.replicas)
            if closed
            else dict(request_rate=requests.request_rate / best.replicas)
        )
        made = commands_for(
            m,
            hw,
            _unit(best),
            at,
            kw["flags"],
            kw["weight_dtype"],
            kw["kv_dtype"],
            share | {"num_requests": at.num_requests},
        )
    else:
        pools = [
            recommend_disagg.pool_of(m, tp, kw, n)
            for tp, n in ((best.prefill_tp, best.prefill_workers), (best.decode_tp, best.decode_workers))
        ]
        made = pool_commands(m, hw, at, *pools, kw["flags"], kw["weight_dtype"], kw["kv_dtype"])
    return Recommendation(
        model=m.id,
        model_name=m.name,
        engine=kw["engine_name"],
        gpu=hw.id,
        gpus=best.gpus,
        layout=_described(best),
        mode=best.mode,
        max_num_batched_tokens=best.max_num_batched_tokens,
        prefill_tp=best.prefill_tp,
        prefill_workers=best.prefill_workers,
        decode_tp=best.decode_tp,
        decode_workers=best.decode_workers,
        replicas=best.replicas,
        tp=best.tp,
        expert_parallel=best.expert_parallel,
        attention_dp=best.attention_dp,
        pipeline_parallel=best.pipeline_parallel,
        input_len=requests.input_len,
        output_len=requests.output_len,
        concurrency=requests.concurrency,
        request_rate=requests.request_rate,
        ttft_target_s=targets["ttft_s"],
        tpot_target_s=targets["tpot_s"],
        statistic=targets["statistic"],
        evaluator=targets["evaluator"] if best.mode == "agg" else "simulation",
        price_per_gpu_hour=price_of(price, hw.id),
        cost_per_hour=best.cost_per_hour,
        minimise=targets["minimise"],
        at=at,
        launch=made["launch"],
        bench=made["bench"],
        candidates=candidates,
        assumptions=_assumptions(
            best, closed, recommend_disagg.searched(kw["engine_name"], requests), targets["minimise"]
        ),
    )


def _described(c: Candidate) -> str:
    if c.mode == "agg":
        return c.layout
    return f"{c.prefill_workers} x {c.prefill_tp}-GPU prefill + {c.decode_workers} x {c.decode_tp}-GPU decode workers"


#: What comes first in the ranking, by the objective, as the assumptions say it.
FIRST = {
    "gpus": "the fewest GPUs, then the cheaper, then the most room",
    "cost": "the least cost per hour at each device's price, then the fewest GPUs, then the most room",
    "energy": "the fewest joules per output token (each unit at its fewest replicas: more run smaller batches, "
    "each weight read for fewer tokens), then the fewest GPUs, then the cheaper",
}


def _assumptions(best: Candidate, closed: bool, no_pools: str | None, minimise: str) -> list[str]:
    budgets = ", ".join(str(b) for b in BUDGETS)
    return [
        "searched: per device kind, engine units of tensor parallel 1-8 GPUs (a mixture of experts also expert "
        "parallel and attention data parallel groups; pipeline stages of 8 past one node), each at the engine's "
        f"token budget and at {budgets} unless one is given, the most one unit serves under the targets "
        f"({'clients' if closed else 'requests/s'}, costmodel capacity), then replicas behind a router, each an "
        f"even share of the load; {FIRST[minimise]}",
        (
            f"disaggregated pools not searched: {no_pools}"
            if no_pools
            else "searched: disaggregated pools of 1-8-GPU prefill and decode workers on one device kind, each pool "
            "sized in closed form for the rate (costmodel.deploy.recommend_disagg); the "
            f"{DISAGG_TRIED} fewest within {DISAGG_REACH:g} x the aggregated answer's GPUs simulated whole, grown "
            "where they miss and trimmed while a worker fewer meets the targets"
        ),
        (
            f"the answer priced again as a whole ({best.replicas} replica(s)): `command` reprices it"
            if best.mode == "agg"
            else "the answer simulated whole; a worker fewer in either pool misses the targets: `command` reprices it"
        ),
        (
            "launch: one replica's command as the engine spells its flags (costmodel.deploy.launch); "
            f"{best.replicas} such launches behind a router; bench: vllm bench serve at one replica's share"
            if best.mode == "agg"
            else "launch: each pool's worker command as the engine spells its flags, the KV cache between them "
            "through the engine's own connector; bench: vllm bench serve at the whole rate, through the router"
        ),
        "not searched: sequence limits, memory fractions and other engine settings (give them as flags)",
    ]
