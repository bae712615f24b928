"""Disaggregated deployments for :func:`costmodel.deploy.recommend.recommend`: on each device kind, for each pair
of worker sizes, prefill and decode workers sized in closed form for a request rate under the targets; the one
chosen is then priced whole (simulated), grown where it misses and trimmed while a worker fewer still meets them.

Sizing one worker of each pool (the pools of :mod:`costmodel.deploy.disagg_steady`):

- decode: the most sequences ``b`` a worker runs whose iteration ``tau(b)`` (and, under an overlap scheduler, the
  iteration a new request waits, spread over its ``k = output - 1`` decode iterations) keeps TPOT within the
  target; by Little's law it then completes ``b / (k tau(b))`` requests a second, so ``D = ceil(R / that)``;
- prefill: one prompt alone takes ``s``; prompts reach the ``P`` workers as Poisson arrivals, each worker an M/D/1
  queue of utilisation ``rho = R s / P``, whose mean wait is ``rho s / (2 (1 - rho))`` (Pollaczek-Khinchine) and
  whose 90th percentile is at most an M/M/1 queue's, ``s ln(10 rho) / (1 - rho)``; the TTFT target less the KV
  transfer and the front end bounds ``rho``, so ``P = ceil(R s / rho)``. A busy worker batches prompts, which the
  queue leaves out: the sizing errs toward workers the trim then takes back.
"""

from __future__ import annotations

import math
from dataclasses import replace

from costmodel.core.errors import CostModelError
from costmodel.deploy.capacity import misses
from costmodel.deploy.disagg import pool_setups, serve_disaggregated, transfer_of
from costmodel.deploy.disagg_steady import decode_pool, prefill_pool
from costmodel.deploy.pools import Pool
from costmodel.deploy.recommend_reports import Candidate
from costmodel.engine.load import Load, mean_length
from costmodel.engine.served import NoRoomForOneRequest

#: The most utilisation a prefill worker is sized to (a queue near 1 waits without bound).
MOST_BUSY = 0.95
#: Times a chosen deployment is grown by a worker when, priced whole, it misses the targets.
GROWTH = 6


def searched(engine_name: str, requests: Load) -> str | None:
    """Why disaggregated pools are not searched for this question, or None where they are."""
    if requests.request_rate is None:
        return "a closed loop's clients are served by aggregated units (disaggregated pools are sized for a rate)"
    if engine_name == "trtllm":
        return "TensorRT-LLM's disaggregated serving is set up in its YAML (trtllm-serve disaggregated -c)"
    return None


def candidates(m, hw, requests: Load, tp_sizes, targets: dict, kw: dict, max_gpus: int, price) -> list[Candidate]:
    """Every pair of prefill and decode worker sizes on ``hw``, each pool sized for ``requests``' rate."""
    prompts, outputs = requests.lengths(100)
    isl, osl = mean_length(prompts), mean_length(outputs)
    roles = {}
    for tp in tp_sizes:
        try:
            roles[tp] = pool_setups(
                m, hw, pool_of(m, tp, kw), pool_of(m, tp, kw), prompts=prompts, outputs=outputs, **_setup_kw(kw)
            )
        except NoRoomForOneRequest:
            roles[tp] = "kv cache"
        except CostModelError as err:  # a worker size the model cannot take (heads, experts)
            roles[tp] = str(err).split(";")[0][:120]
    out = []
    for tp_p in tp_sizes:
        for tp_d in tp_sizes:
            out.append(_candidate(m, hw, roles, tp_p, tp_d, isl, osl, requests, targets, kw, max_gpus, price))
    return out


def pool_of(m, tp: int, kw: dict, workers: int = 1) -> Pool:
    """A pool of ``workers`` of ``tp`` GPUs (a mixture of experts over them by expert parallel), the limits given."""
    flags = kw["flags"]
    return Pool(
        tp=tp,
        workers=workers,
        expert_parallel=m.moe is not None and tp > 1,
        max_num_seqs=flags.max_num_seqs,
        max_num_batched_tokens=flags.max_num_batched_tokens,
    )


def _setup_kw(kw: dict) -> dict:
    """pool_setups' arguments from recommend's: the engine flags less the pools' own limits."""
    flags = replace(kw["flags"], max_num_seqs=None, max_num_batched_tokens=None)
    return dict(
        engine_name=kw["engine_name"],
        flags=flags,
        timing="graph",
        weight_dtype=kw["weight_dtype"],
        kv_dtype=kw["kv_dtype"],
        overheads=None,
        frontend=kw.get("frontend", "dynamo"),
    )


def _candidate(m, hw, roles, tp_p, tp_d, isl, osl, requests, targets, kw, max_gpus, price) -> Candidate:
    rate = requests.request_rate
    base = dict(
        gpu=hw.id,
        mode="disagg",
        layout=f"{tp_p}-GPU prefill, {tp_d}-GPU decode workers",
        unit_gpus=tp_p + tp_d,
        tp=tp_d,
        expert_parallel=m.moe is not None and tp_d > 1,
        attention_dp=1,
        pipeline_parallel=1,
        prefill_tp=tp_p,
        decode_tp=tp_d,
    )
    why = next((roles[tp] for tp in (tp_p, tp_d) if isinstance(roles[tp], str)), None)
    if why is not None:
        return Candidate(**base, per_unit=None, binds=why, replicas=None, gpus=None)
    pre, dec = roles[tp_p][0], roles[tp_d][1]
    try:
        transfer = transfer_of(pre, dec, pool_of(m, tp_d, kw), tp_p + tp_d, isl, None).time_s
    except CostModelError as err:  # no link the KV cache can cross between the pools (a device without one)
        return Candidate(**base, per_unit=None, binds=str(err).split(";")[0][:120], replicas=None, gpus=None)
    per_p, binds_p = _prefill_rate(pre, isl, transfer, targets)
    per_d, binds_d = _decode_rate(dec, m, tp_d, kw, isl, osl, targets)
    if per_p is None or per_d is None:
        return Candidate(**base, per_unit=None, binds=binds_p if per_p is None else binds_d, replicas=None, gpus=None)
    workers_p, workers_d = math.ceil(rate / per_p - 1e-9), math.ceil(rate / per_d - 1e-9)
    gpus = workers_p * tp_p + workers_d * tp_d
    if gpus > max_gpus:
        return Candidate(**base, per_unit=None, binds=f"needs {gpus} GPUs", replicas=None, gpus=None)
    return Candidate(
        **base,
        per_unit=min(workers_p * per_p, workers_d * per_d),
        binds=binds_p if workers_p * per_p <= workers_d * per_d else binds_d,
        replicas=1,
        gpus=gpus,
        cost_per_hour=gpus * price if price is not None else None,
        prefill_workers=workers_p,
        decode_workers=workers_d,
    )


def _prefill_rate(pre, isl: float, transfer: float, targets: dict) -> tuple[float | None, str]:
    """(requests a second one prefill worker is sized to take, what bounds it) or (None, why none)."""
    s = prefill_pool(pre, Pool(tp=pre.pr.tp), round(isl))[0]
    if targets["ttft_s"] is None:
        return MOST_BUSY / s, "saturation"
    room = targets["ttft_s"] - transfer - pre.request_s
    if room < s:
        return None, "ttft: one prompt alone takes longer"
    p90 = targets["statistic"] == "p90"

    def wait(rho: float) -> float:
        return s * max(0.0, math.log(10 * rho)) / (1 - rho) if p90 else rho * s / (2 * (1 - rho))

    lo, hi = 0.0, MOST_BUSY
    if s + wait(hi) <= room:
        return hi / s, "saturation"
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if s + wait(mid) <= room else (lo, mid)
    return (lo / s, "ttft") if lo > 0 else (None, "ttft")


def _decode_rate(dec, m, tp_d: int, kw: dict, isl: float, osl: float, targets: dict) -> tuple[float | None, str]:
    """(requests a second one decode worker completes within the TPOT target, what bounds it) or (None, why)."""
    k = osl - 1
    if k < 1:
        return float("inf"), "saturation"
    fit, cap, tau, _ = decode_pool(dec, pool_of(m, tp_d, kw), round(isl), round(osl), isl + osl / 2, k)

    def tpot(b: float) -> float:
        return tau(b) * (1 + dec.eng.lag / k)

    limit = targets["tpot_s"]
    if limit is not None and tpot(1) > limit:
        return None, "tpot: one sequence alone is slower"
    b, binds = cap, ("kv cache" if fit <= dec.eng.max_num_seqs else "max_num_seqs")
    if limit is not None and tpot(cap) > limit:
        lo, hi = 1, cap
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if tpot(mid) <= limit else (lo, mid - 1)
        b, binds = lo, "tpot"
    return b / (k * tau(b)), binds


def verified(m, hw, requests: Load, best: Candidate, targets: dict, kw: dict, max_gpus: int):
    """(the candidate grown where it misses and trimmed while a worker fewer meets the targets, its whole
    prediction), priced by simulation; (None, why) where no size of it within ``max_gpus`` meets them."""
    workers = [best.prefill_workers, best.decode_workers]
    tps = (best.prefill_tp, best.decode_tp)

    def price(w):
        if w[0] * tps[0] + w[1] * tps[1] > max_gpus:
            return None, "needs more than max_gpus"
        p = serve_disaggregated(
            m,
            hw,
            requests,
            prefill=pool_of(m, tps[0], kw, w[0]),
            decode=pool_of(m, tps[1], kw, w[1]),
            evaluator="simulation",
            **_setup_kw(kw),
        )
        if p.overloaded:
            return p, "prefill" if p.saturation_binds == "prefill pool" else "decode"
        missed = misses(p, targets["statistic"], targets["tpot_s"], targets["ttft_s"])
        return p, {"tpot": "decode", "ttft": "prefill"}.get(missed)

    at, short = price(workers)
    for _ in range(GROWTH):
        if short is None or at is None:
            break
        workers[0 if short == "prefill" else 1] += 1
        at, short = price(workers)
    if at is None or short is not None:
        return None, f"priced whole it misses the targets ({short})"
    for side in (0, 1):  # a worker fewer while the targets still hold
        while workers[side] > 1:
            fewer = workers.copy()
            fewer[side] -= 1
            p, short = price(fewer)
            if p is None or short is not None:
                break
            workers, at = fewer, p
    gpus = workers[0] * tps[0] + workers[1] * tps[1]
    return best.model_copy(update={"prefill_workers": workers[0], "decode_workers": workers[1], "gpus": gpus}), at
