"""A layout planner: every way this tool can serve a model on N devices of a kind, each priced under load by the
engine model, and the Pareto front of output tokens/s per device against tokens/s per user.

Layouts: aggregated (tensor parallel over ``tp`` devices, ``N / tp`` replicas sharing the clients evenly; for a
mixture of experts also the routed experts spread over the ``tp`` devices, expert parallel; ``N / tp`` pipeline
stages; for a mixture of experts ``N / tp`` attention-data-parallel groups with the experts over all ``N``) and
disaggregated (``P`` prefill workers of ``tp_p`` devices and ``D`` decode workers of ``tp_d``, ``P tp_p + D tp_d =
N``; for a mixture of experts also one decode worker of ``(N - P tp_p) / tp_d`` attention-data-parallel groups
with the experts over all of them). Each is loaded with a closed loop of clients, doubling from one until its
throughput per device stops growing (by 2%) or the clients reach ``max_concurrency`` per replica (or per
deployment, disaggregated), in the engine model's closed form; the points near that front are then simulated. A
layout whose weights leave no room for a request, or that the model cannot be split over, is listed with the
reason.
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.core import checks
from costmodel.core.deadline import limited
from costmodel.core.errors import CostModelError
from costmodel.core.progress import bar
from costmodel.core.vocab import DEFAULTS
from costmodel.deploy.plan_reports import Plan, PlanPoint, SkippedLayout
from costmodel.engine.config import EngineFlags
from costmodel.engine.layout import Layout
from costmodel.engine.load import Load
from costmodel.hardware.profile import HardwareProfile
from costmodel.model.presets import ModelPreset

#: What a plan does not enumerate yet, stated in every plan.
NOT_ENUMERATED = (
    "pipeline parallel in a disaggregated pool, attention data parallel in its prefill pool or with replicas",
    "expert parallel over groups other than the tensor-parallel one (or all the devices, with attention data parallel)",
)


def _powers(n: int) -> list[int]:
    return [t for t in (1 << k for k in range(n.bit_length())) if n % t == 0]


def layouts(m: ModelPreset, n: int) -> list[Layout]:
    """Every aggregated and disaggregated layout over ``n`` devices, tensor-parallel sizes powers of two."""
    eps = (False, True) if m.moe else (False,)
    out = [
        Layout("agg", tp=t, replicas=n // t, expert_parallel=ep)
        for t in _powers(n)
        for ep in eps
        if not (ep and t == 1)
    ]
    # pipeline parallel: n / t stages of t devices (one replica)
    out += [
        Layout("agg", tp=t, pipeline_parallel=n // t, expert_parallel=ep)
        for t in _powers(n)
        for ep in eps
        if n // t > 1 and not (ep and t == 1) and n // t <= m.layers
    ]
    if m.moe:  # attention data parallel: n / t groups, the experts over all n devices (whole, or width-sharded)
        out += [
            Layout("agg", tp=t, attention_dp=n // t, expert_parallel=ep) for t in _powers(n) if n // t > 1 for ep in eps
        ]
    for tp_p in _powers(n):
        for tp_d in _powers(n):
            for workers_p in range(1, n // tp_p + 1):
                left = n - tp_p * workers_p
                if left >= tp_d and left % tp_d == 0:
                    out += [
                        Layout(
                            "disagg",
                            prefill_tp=tp_p,
                            prefill_workers=workers_p,
                            decode_tp=tp_d,
                            decode_workers=left // tp_d,
                            expert_parallel=ep,
                        )
                        for ep in eps
                        if not (ep and min(tp_p, tp_d) == 1)
                    ]
                    if m.moe and left // tp_d > 1:  # one decode worker of attention data parallel groups
                        out += [
                            Layout(
                                "disagg",
                                prefill_tp=tp_p,
                                prefill_workers=workers_p,
                                decode_tp=tp_d,
                                decode_workers=1,
                                decode_attention_dp=left // tp_d,
                                expert_parallel=ep,
                            )
                            for ep in eps
                        ]
    return out


def price_point(
    m: ModelPreset,
    hw: HardwareProfile,
    layout: Layout,
    concurrency: int,
    *,
    input_len: int,
    output_len: int,
    engine_name: str,
    weight_dtype,
    kv_dtype,
    targets,
    evaluator: str = "simulation",
    flags: EngineFlags = EngineFlags(),
    requests: Load | None = None,
    frontend: str = "dynamo",
) -> PlanPoint:
    """One layout under ``concurrency`` clients in all (spread evenly over an aggregated layout's replicas), the
    engine's ``flags`` set (a disaggregated pool's token budget and sequence limit on each Pool); ``requests``:
    their lengths and count where not ``input_len`` + ``output_len`` each."""
    from costmodel.deploy.disagg import Pool, serve_disaggregated
    from costmodel.engine.served import serve

    kw = dict(engine_name=engine_name, weight_dtype=weight_dtype, kv_dtype=kv_dtype, evaluator=evaluator)
    kw["frontend"] = frontend
    limits = dict(max_num_seqs=flags.max_num_seqs, max_num_batched_tokens=flags.max_num_batched_tokens)
    base = requests if requests is not None else Load(input_len, output_len)
    if layout.mode == "agg":  # one replica, with its share of the clients
        load = base.with_(concurrency=concurrency // layout.replicas, request_rate=None)
        p = serve(m, hw, load, layout=replace(layout, replicas=1), flags=flags, **kw)
    else:
        p = serve_disaggregated(
            m,
            hw,
            base.with_(concurrency=concurrency, request_rate=None),
            prefill=Pool(
                tp=layout.prefill_tp,
                workers=layout.prefill_workers,
                expert_parallel=layout.expert_parallel and layout.prefill_tp > 1,
                **limits,
            ),
            decode=Pool(
                tp=layout.decode_tp,
                workers=layout.decode_workers,
                expert_parallel=layout.expert_parallel,
                attention_dp=layout.decode_attention_dp,
                **limits,
            ),
            flags=replace(flags, max_num_seqs=None, max_num_batched_tokens=None),
            **kw,
        )
    return _point(hw, layout, concurrency, p, targets, kv_cache_full(p, input_len, output_len))


def _point(hw, layout, concurrency: int, p, targets, full: bool) -> PlanPoint:
    """A priced layout (``p``, its prediction) as a plan's point: whether it meets the targets."""
    ttft_t, tpot_t = targets
    meets = (
        None
        if targets == (None, None)
        else ((ttft_t is None or p.ttft_s <= ttft_t) and (tpot_t is None or p.tpot_s <= tpot_t))
    )
    return PlanPoint(
        device=hw.id,
        layout=layout.describe(),
        mode=layout.mode,
        tp=layout.tp,
        replicas=layout.replicas,
        expert_parallel=layout.expert_parallel,
        attention_dp=layout.attention_dp,
        pipeline_parallel=layout.pipeline_parallel,
        prefill_tp=layout.prefill_tp,
        prefill_workers=layout.prefill_workers,
        decode_tp=layout.decode_tp,
        decode_workers=layout.decode_workers,
        decode_attention_dp=layout.decode_attention_dp,
        concurrency=concurrency,
        ttft_s=p.ttft_s,
        tpot_s=p.tpot_s,
        output_tokens_per_s_per_device=p.output_tokens_per_s_per_device,
        output_tokens_per_s_per_user=p.output_tokens_per_s_per_user,
        power_w=p.power_w,
        output_tokens_per_j=p.output_tokens_per_j,
        meets_targets=meets,
        ttft_band=p.ttft_band,
        tpot_band=p.tpot_band,
        kv_cache_full=full,
    )


def kv_cache_full(p, input_len: int, output_len: int) -> bool:
    """Whether a served prediction reached its memory limit: a request was preempted, or at the KV cache's fullest
    the pages left held less than one more request (aggregated); the decode workers' mean cached tokens left no room
    for one more request (disaggregated)."""
    request = input_len + output_len
    if hasattr(p, "kv_use_max"):
        return p.preemptions > 0 or (1 - p.kv_use_max) * p.engine.kv_cache_tokens < request
    return p.decode.mean_batch * (input_len + output_len / 2) + request > p.decode.kv_cache_tokens


def pareto(points: list[PlanPoint]) -> list[PlanPoint]:
    """The points no other point beats on both axes (at least as good on both, better on one), by falling
    tokens/s per user."""
    ranked = sorted(points, key=lambda p: (-p.output_tokens_per_s_per_user, -p.output_tokens_per_s_per_device))
    front, best = [], -1.0
    for p in ranked:
        if p.output_tokens_per_s_per_device > best:
            front.append(p)
            best = p.output_tokens_per_s_per_device
    return front


#: A layout's throughput per device, grown by less than this share when its clients double, is saturated: more
#: clients only queue.
SATURATION = 0.02


def sweep(
    m: ModelPreset, hw: HardwareProfile, layout: Layout, *, max_concurrency: int, evaluator: str = "steady-state", **kw
) -> tuple[list[PlanPoint], str | None]:
    """``layout`` under a closed loop of clients doubling from one per engine (:attr:`Layout.units`) until its
    throughput per device saturates or the clients reach ``max_concurrency`` per engine: its points, and the
    reason it cannot serve (None where it can)."""
    from costmodel.engine.served import NoRoomForOneRequest

    points, previous, c = [], 0.0, 1
    while c <= max_concurrency:
        try:
            pt = price_point(m, hw, layout, c * layout.units, evaluator=evaluator, **kw)
        except NoRoomForOneRequest:
            return points, "the weights leave no room for one request"
        except CostModelError as err:
            return points, str(err)
        points.append(pt)
        if pt.output_tokens_per_s_per_device < previous * (1 + SATURATION):
            break
        previous, c = pt.output_tokens_per_s_per_device, c * 2
    return points, None


#: How far below the closed form's front a point may lie and still be simulated: the closed form's means are
#: within a few per cent of the simulation's on throughput (tests/test_disagg.py, tests/test_served.py).
SCREEN_SLACK = 0.05


def near_front(points: list[PlanPoint], slack: float) -> list[PlanPoint]:
    """The points that no other point beats by more than ``slack`` on both axes."""
    out = []
    for p in points:
        dev, user = p.output_tokens_per_s_per_device * (1 + slack), p.output_tokens_per_s_per_user * (1 + slack)
        if not any(q.output_tokens_per_s_per_device > dev and q.output_tokens_per_s_per_user > user for q in points):
            out.append(p)
    return out


#: The most devices a plan searches (32 nodes of 8): the layouts grow with the divisors of the count and each is
#: priced under load, so a larger count is refused before any work rather than searched for hours.
MAX_PLAN_DEVICES = 256


def plan(
    m: ModelPreset,
    hws: list[HardwareProfile],
    *,
    devices: int,
    input_len: int,
    output_len: int,
    engine_name: str = DEFAULTS["engine"],
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    ttft_s: float | None = None,
    tpot_s: float | None = None,
    max_concurrency: int = 256,
    flags: EngineFlags = EngineFlags(),
    time_limit: float | None = None,
    requests: Load | None = None,
    frontend: str = "dynamo",
) -> Plan:
    """Every layout of ``m`` on ``devices`` of each of ``hws``, priced under load; the front and the best (every
    engine with ``flags`` set; ``requests``: their lengths drawn, their count, where not fixed at ``input_len`` +
    ``output_len``). Past ``time_limit`` seconds no new layout or point is priced: the plan holds what was, saying
    so."""
    _check_plan(m, hws, devices, input_len, output_len, max_concurrency, ttft_s, tpot_s)
    targets = (ttft_s, tpot_s)
    kw = dict(
        input_len=input_len,
        output_len=output_len,
        engine_name=engine_name,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        targets=targets,
        flags=flags,
        requests=requests,
        frontend=frontend,
    )
    points, fronts, best, skipped = [], [], [], []
    deadline = limited(time_limit)
    for hw in hws:
        if points and deadline.passed():
            deadline.stop(hws.index(hw), len(hws), "device kinds")
            break
        with bar(len(layouts(m, devices)), f"layouts on {hw.id}") as advance:
            mine, skips = _plan_device(m, hw, devices, max_concurrency, kw, advance, deadline)
        points += mine
        fronts += pareto(mine)
        skipped += skips
        ok = [p for p in mine if p.meets_targets]
        if ok:
            best.append(max(ok, key=lambda p: p.output_tokens_per_s_per_device))
    if not points:
        raise CostModelError(
            f"no layout of {m.id} on {devices} device(s) of {', '.join(h.id for h in hws)} can "
            f"serve a request of {input_len} + {output_len} tokens: "
            + "; ".join(sorted({s.reason for s in skipped}))[:400]
        )
    return Plan(
        model=m.id,
        model_name=m.name,
        devices=devices,
        input_len=input_len,
        output_len=output_len,
        engine=engine_name,
        ttft_target_s=ttft_s,
        tpot_target_s=tpot_s,
        points=points,
        front=fronts,
        best=best,
        skipped=skipped,
        assumptions=[
            *([deadline.stopped] if deadline.stopped else []),
            *_plan_assumptions(m, devices, max_concurrency),
        ],
        stopped=deadline.stopped,
    )


def _check_plan(m, hws, devices, input_len, output_len, max_concurrency, ttft_s, tpot_s) -> None:
    """plan()'s arguments checked, each an error naming it."""
    checks.instance("model", m, ModelPreset, "a ModelPreset (load_model(...))")
    checks.count("devices", devices, most=MAX_PLAN_DEVICES)
    checks.count("input_len", input_len)
    checks.count("output_len", output_len)
    checks.count("max_concurrency", max_concurrency)
    if not isinstance(hws, (list, tuple)) or not hws:
        raise CostModelError(f"hws must be a non-empty list of HardwareProfile (load_profile(...)), got {hws!r}"[:200])
    for hw in hws:
        checks.instance("hws", hw, HardwareProfile, "a HardwareProfile (load_profile(...))")
    for name, t in (("ttft_s", ttft_s), ("tpot_s", tpot_s)):
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1e6):
            raise CostModelError(f"{name} must be a positive number of seconds, got {t!r}")
    if m.architecture != "decoder":
        raise CostModelError(f"serving is modelled for decoder-only models; {m.id} is {m.architecture}")


def _plan_device(m: ModelPreset, hw: HardwareProfile, devices: int, max_concurrency: int, kw: dict, advance, deadline):
    """(simulated points, skipped layouts) on one device kind: every layout swept in closed form, then the closed
    form's front (to within its error against the simulation) and best, with their neighbouring loads, simulated;
    past the ``deadline`` no new layout is swept and no new point simulated."""
    skipped = []
    # 1. every layout swept in closed form (simulated where the requests' prefix cache is: it has no closed form)
    asked = kw.get("requests")
    screen = "simulation" if asked is not None and asked.reuses_cache else "steady-state"
    screened = []
    every = layouts(m, devices)
    for i, layout in enumerate(every):
        if screened and deadline.passed():
            deadline.stop(i, len(every), f"layouts on {hw.id}")
            break
        swept, reason = sweep(m, hw, layout, max_concurrency=max_concurrency, evaluator=screen, **kw)
        advance()
        screened += [(layout, pt) for pt in swept]
        if reason is not None:
            skipped.append(SkippedLayout(device=hw.id, layout=layout.describe(), reason=reason))
    # 2. the closed form's front (to within its error against the simulation) and best, with their
    # neighbouring loads, simulated
    chosen = near_front([pt for _, pt in screened], SCREEN_SLACK)
    ok = [pt for _, pt in screened if pt.meets_targets]
    if ok:
        chosen.append(max(ok, key=lambda p: p.output_tokens_per_s_per_device))
    picked = {(pt.layout, pt.concurrency) for pt in chosen}
    candidates = {}
    for layout, pt in screened:
        c = pt.concurrency
        for near in (c // 2, c, c * 2):
            if (pt.layout, c) in picked and layout.units <= near <= max_concurrency * layout.units:
                candidates[(pt.layout, near)] = (layout, near)
    priced = []
    for layout, c in candidates.values():
        if priced and deadline.passed():
            deadline.stop(len(priced), len(candidates), f"front points on {hw.id} (every layout screened)")
            break
        priced.append(price_point(m, hw, layout, c, **kw))
    return priced, skipped


def _plan_assumptions(m: ModelPreset, devices: int, max_concurrency: int) -> list[str]:
    """What a plan enumerates and how it chooses, in words."""
    return [
        f"layouts of {devices} device(s): aggregated (tensor parallel, replicas sharing the clients "
        "evenly"
        + (
            ", routed experts sharded or expert parallel over the tensor-parallel group; and "
            "attention data parallel, the experts over all the devices"
            if m.moe
            else ""
        )
        + "; pipeline parallel over stages of tensor-parallel groups), and disaggregated prefill and "
        "decode pools"
        + (
            "; a decode worker also as attention data parallel groups, the experts over all its devices"
            if m.moe
            else ""
        )
        + "; "
        f"tensor-parallel sizes powers of two; not enumerated: {', '.join(NOT_ENUMERATED)}",
        f"each layout under a closed loop of clients doubling from one (per replica) until its "
        f"throughput per device grows by less than 2% or the clients reach {max_concurrency} per "
        "replica, in the engine model's steady-state closed form; the points within 5% of that front "
        "and the best under the targets, with half and twice their clients, then simulated (costmodel "
        "predict --engine with --concurrency, and --disaggregated for the pools): the points shown",
        "the front: per device kind, the points no other point of that kind matches or beats on both "
        "output tokens/s per device and per user; the best: the most tokens/s per device whose mean "
        "TTFT and TPOT meet the targets",
    ]
