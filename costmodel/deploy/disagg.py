"""Disaggregated serving: prefill and decode on separate pools of engine workers, the KV cache of each prompt
moving from one to the other.

A request goes to the prefill worker with the fewest prompt tokens still to prefill. A prefill worker runs
iterations of prompts alone (up to its sequence limit and token budget, a prompt longer than the budget in
chunks), each priced as the model step for that batch of prompts plus the engine's fixed cost per iteration (and
the host's time where one is fitted: :meth:`costmodel.engine.served.Setup.wall`).
When a prompt's last chunk is done the request has its first token and its KV cache is sent to the decode
pool: the prompt's cache as the decode workers store it, over the link between the pools (the devices'
interconnect when both pools sit in one scale-up domain, each device's network port otherwise), every device
sending and receiving its own shard at once. TTFT = queueing + prefill + transfer (+ the front end's latency).

A decode worker takes the arriving request (the one with the fewest requests) at its next iteration when it
has a free sequence slot and KV pages for the request's whole context; an engine of :data:`DECODE_RESERVES_FIRST`
(SGLang) instead reserves the prompt's pages before the prefill, where the worker can still hand out the prompt and
a headroom beside every request it holds (a request that finds no decode worker with room waits, in arrival order,
before its prefill), lets its running requests grow a token a step within the cache, and retracts the one with the
fewest tokens out where the next step would not fit, resuming it first. Decode workers run decode-only iterations: one
token per running sequence, priced as the model step for that batch at its contexts plus the engine's fixed
cost. Load is a closed loop of ``concurrency`` clients or Poisson arrivals, as for one pool
(:mod:`costmodel.engine.simulate`).
"""

from __future__ import annotations

import numpy as np

from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.deploy.disagg_reports import DisaggPrediction, KvTransfer, PoolSummary, TtftSplit
from costmodel.deploy.pools import Pool, prefill_time, simulated
from costmodel.deploy.workers import DECODE_RESERVES_FIRST, PREFILL_POOL_WITHOUT_OVERLAP
from costmodel.engine.config import EngineFlags, engine
from costmodel.engine.load import Load, checked_load, mean_length
from costmodel.engine.reports import Stats
from costmodel.engine.reports import assumptions as pool_assumptions
from costmodel.engine.served import Setup, checkpoint_kv_dtype
from costmodel.hardware.profile import HardwareProfile
from costmodel.model.presets import ModelPreset
from costmodel.model.pricing import pricing
from costmodel.model.reports import model_hardware
from costmodel.price.bands import served as served_bands
from costmodel.price.bands import served_assumption


def kv_link(hw_p: HardwareProfile, hw_d: HardwareProfile, devices: int) -> tuple[str, float, float]:
    """(what, bytes/s one way per device, latency) of the link a prompt's cache crosses: the interconnect when
    both pools are one device kind within one scale-up domain, each device's network port otherwise."""
    same = hw_p.id == hw_d.id
    domain = hw_p.domain
    if same and hw_p.interconnect_bytes_per_s is not None and domain is not None and devices <= domain:
        lat = hw_p.interconnect_latency_s.value if hw_p.interconnect_latency_s is not None else 0.0
        return (
            f"{hw_p.interconnect or 'interconnect'} inside one {domain}-device domain",
            hw_p.interconnect_bytes_per_s.value / 2,
            lat,
        )
    missing = [h.id for h in {hw_p.id: hw_p, hw_d.id: hw_d}.values() if h.scale_out_bytes_per_s is None]
    if missing:
        why = (
            "the pools are different devices"
            if not same
            else f"{devices} devices do not fit one scale-up domain"
            if domain is not None
            else f"{hw_p.id} states no scale-up domain (scale_up_devices)"
        )
        raise CostModelError(
            f"the KV cache crosses the network ({why}), and {', '.join(missing)} states no "
            "network bandwidth per device (scale_out_bytes_per_s); give --kv-link-bandwidth"
        )
    bw = min(hw_p.scale_out_bytes_per_s.value, hw_d.scale_out_bytes_per_s.value)
    lat = max((h.scale_out_latency_s.value for h in (hw_p, hw_d) if h.scale_out_latency_s is not None), default=0.0)
    return "each device's network port", bw, lat


def serve_disaggregated(
    m: ModelPreset,
    hw: HardwareProfile,
    load: Load,
    *,
    prefill: Pool,
    decode: Pool,
    engine_name: str = "vllm",
    flags: EngineFlags = EngineFlags(),
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    timing: str = "graph",
    kv_link_bytes_per_s: float | None = None,
    overheads: dict | None = None,
    evaluator: str = "simulation",
    check: bool = False,
    frontend: str = "dynamo",
) -> DisaggPrediction:
    """``load``'s requests served by ``prefill.workers`` prefill engines and ``decode.workers`` decode engines of
    ``engine_name`` (each pool on its ``gpu``, else ``hw``; each pool's limits on the :class:`Pool`, the engine's
    other ``flags`` for both). ``kv_link_bytes_per_s`` overrides the link the KV cache crosses (one way, per device).
    ``evaluator`` "steady-state": the closed form of :func:`steady_state` (means, a closed loop only). ``frontend``:
    the front end the requests pass (:data:`costmodel.engine.served.FRONTENDS`), its latency added to TTFT. Lengths
    drawn as :func:`costmodel.engine.load.lengths` draws them (the closed form takes their means; each request's KV
    transfer is priced at the mean prompt's)."""
    if evaluator not in ("simulation", "steady-state"):
        raise CostModelError(f"unknown evaluator {evaluator!r}; known: simulation, steady-state")
    n = checked_load(m, hw, load)
    concurrency, request_rate = load.concurrency, load.request_rate
    warmup_requests, burstiness = load.warmup_requests, load.burstiness
    if evaluator == "steady-state" and concurrency is None:
        raise CostModelError(
            "the steady-state form of disaggregated serving takes a concurrency (a closed loop); "
            "simulate a request rate"
        )
    checks.instance("flags", flags, EngineFlags, "EngineFlags(...)")
    pooled = sorted(set(flags.settings()) & {"max_num_seqs", "max_num_batched_tokens"})
    if pooled:
        raise CostModelError(f"{', '.join(pooled)} is set per pool: give it on Pool(...) for prefill and decode")
    for name, pool in (("prefill", prefill), ("decode", decode)):
        if not isinstance(pool, Pool):
            raise CostModelError(f"{name} must be a Pool(tp=..., workers=...), got {type(pool).__name__}")
        checks.count(f"{name} tp", pool.tp)
        checks.count(f"{name} workers", pool.workers)
        checks.count(f"{name} attention dp", pool.attention_dp)
        if pool.gpu is not None:
            checks.instance(f"{name} gpu", pool.gpu, HardwareProfile, "a HardwareProfile (load_profile(...))")
    if kv_link_bytes_per_s is not None and (
        isinstance(kv_link_bytes_per_s, bool)
        or not isinstance(kv_link_bytes_per_s, (int, float))
        or not 1e6 <= kv_link_bytes_per_s < 1e16
    ):
        raise CostModelError(f"KV link bandwidth must be bytes per second in [1e6, 1e16), got {kv_link_bytes_per_s!r}")
    kv_dtype = kv_dtype or checkpoint_kv_dtype(m, engine_name, weight_dtype)
    prompts, outputs = load.lengths(n + warmup_requests)
    mean_in, mean_out = mean_length(prompts), mean_length(outputs)
    setups = []
    for pool, max_context in ((prefill, int(prompts.max())), (decode, int(prompts.max() + outputs.max()))):
        dev = pool.gpu or hw
        eng = engine(engine_name, capacity_bytes=dev.engine_memory, device_name=dev.name, tp=pool.tp).with_flags(
            **flags.settings(), max_num_batched_tokens=pool.max_num_batched_tokens, max_num_seqs=pool.max_num_seqs
        )
        if pool is prefill and engine_name in PREFILL_POOL_WITHOUT_OVERLAP:
            eng = eng.with_flags(async_scheduling=False)
        pr = pricing(
            m,
            dev,
            tp=pool.tp,
            timing=timing,
            weight_dtype=weight_dtype,
            kv_dtype=kv_dtype,
            expert_parallel=pool.expert_parallel,
            attention_dp=pool.attention_dp,
            **eng.kernels,
        )
        setups.append(Setup(m, pr, eng, max_context=max_context, overheads=overheads, frontend=frontend))
    pre, dec = setups
    if not pre.eng.chunked_prefill and int(prompts.max()) > pre.eng.max_num_batched_tokens:
        raise CostModelError(
            f"a prompt of {int(prompts.max())} tokens exceeds the prefill workers' token budget "
            f"{pre.eng.max_num_batched_tokens} and chunked prefill is off"
        )
    devices = prefill.devices() + decode.devices()
    if kv_link_bytes_per_s is not None:
        link, bw, lat = "as given", float(kv_link_bytes_per_s), 0.0
    else:
        link, bw, lat = kv_link(pre.pr.hw, dec.pr.hw, devices)
    per_device = max(pre.kv_per_token, dec.kv_per_token) * mean_in
    transfer = KvTransfer(
        bytes_per_request=dec.kv_per_token * decode.tp * mean_in,
        bytes_per_device=per_device,
        link=link,
        link_bytes_per_s=bw,
        latency_s=lat,
        time_s=lat + per_device / bw,
    )

    if evaluator == "steady-state":
        got = steady_state(
            pre,
            dec,
            prefill,
            decode,
            concurrency=concurrency,
            input_len=mean_in,
            output_len=mean_out,
            transfer_s=transfer.time_s,
        )
    else:
        got = simulated(
            pre,
            dec,
            prefill,
            decode,
            prompts=prompts,
            outputs=outputs,
            input_len=mean_in,
            warmup=warmup_requests,
            concurrency=concurrency,
            request_rate=request_rate,
            transfer_s=transfer.time_s,
            seed=load.seed,
            check=check,
            burstiness=burstiness,
        )
    most = None
    if request_rate is not None:  # an open loop: the most the pools complete (their capacities, the closed form's)
        most = steady_state(
            pre, dec, prefill, decode, concurrency=1, input_len=mean_in, output_len=mean_out, transfer_s=transfer.time_s
        )["most"]
    summaries = [
        PoolSummary(
            role=role,
            hardware=model_hardware(s.pr),
            tp=pool.tp,
            workers=pool.workers,
            attention_dp=pool.attention_dp,
            devices=pool.devices(),
            max_num_seqs=s.eng.max_num_seqs,
            max_num_batched_tokens=s.eng.max_num_batched_tokens,
            kv_cache_tokens=s.kv_tokens,
            kv_cache_bytes_per_token=s.kv_per_token,
            mean_batch=got[role]["mean_batch"],
            busy_share=got[role]["busy_share"],
            iterations=got[role]["iterations"],
        )
        for role, pool, s in (("prefill", prefill, pre), ("decode", decode, dec))
    ]
    ttft = got["ttft"]
    ttft_band, tpot_band = served_bands(pre.eng.name, m.moe is not None, "disagg", ttft.mean, got["tpot"].mean)
    return DisaggPrediction(
        model=m.id,
        model_name=m.name,
        engine=pre.eng.name,
        engine_version=pre.eng.version,
        evaluator=evaluator,
        prefill=summaries[0],
        decode=summaries[1],
        devices=devices,
        concurrency=concurrency,
        request_rate=request_rate,
        num_requests=n,
        input_len=float(prompts.mean()),
        output_len=float(outputs.mean()),
        ttft_s=ttft.mean,
        tpot_s=got["tpot"].mean,
        e2e_s=got["e2e"].mean,
        ttft=ttft,
        tpot=got["tpot"],
        e2e=got["e2e"],
        ttft_band=ttft_band,
        tpot_band=tpot_band,
        ttft_split=TtftSplit(
            queue_s=got["queue_s"], prefill_s=got["prefill_s"], transfer_s=transfer.time_s, front_end_s=pre.request_s
        ),
        kv_transfer=transfer,
        requests_per_s=got["requests_per_s"],
        output_tokens_per_s=got["requests_per_s"] * float(outputs.mean()),
        output_tokens_per_s_per_device=got["requests_per_s"] * float(outputs.mean()) / devices,
        output_tokens_per_s_per_user=got["per_user"],
        decode_waits=got["waits"],
        saturation_requests_per_s=most[0] if most else None,
        saturation_binds=most[1] if most else None,
        overloaded=bool(most) and request_rate >= most[0],
        burstiness=burstiness,
        assumptions=[
            *_assumptions(
                pre, dec, prefill, decode, transfer, concurrency, request_rate, warmup_requests, evaluator, burstiness
            ),
            served_assumption(ttft_band, pre.pr.hw.id),
        ],
    )


def steady_state(
    pre: Setup, dec: Setup, p: Pool, d: Pool, *, concurrency: int, input_len: int, output_len: int, transfer_s: float
) -> dict:
    """Means of a closed loop of ``concurrency`` clients in steady state, in closed form.

    A request cycles through its prefill ``s_p`` (alone on a worker), the transfer, and ``k = osl - 1`` decode
    iterations of ``tau(b)`` at ``b`` sequences per decode worker (at the mean context ``isl + osl / 2``; by
    Little's law ``b = X k tau(b) / D`` for a throughput of ``X`` requests per second). Unhindered, ``X = C /
    (s_p + transfer + k tau(b))``. The prefill pool serves at most ``P m / t(m)`` requests per second (a busy
    worker batches ``m`` waiting prompts, up to its limits), the decode pool at most ``D cap / (k tau(cap))``
    (``cap``: its sequence limit or its KV cache at each request's peak, or, where the decode worker reserves first,
    at each request's mean tokens and headroom); past either the clients wait, by
    Little's law ``C / X`` less the cycle, for a prefill worker (in TTFT) or a decode slot (in TPOT; in TTFT where
    the decode worker reserves its pages before the prefill, :data:`DECODE_RESERVES_FIRST`, and pages bind). Under an
    overlap scheduler a request joins a busy decode worker one iteration later (in TPOT)."""
    isl, osl = input_len, output_len
    k = osl - 1
    ctx = isl + osl / 2
    s_p = prefill_time(pre, isl)
    budget = pre.eng.max_num_batched_tokens
    m = max(1, min(pre.eng.max_num_seqs, budget // isl, pre.kv_tokens // isl)) if isl <= budget else 1
    t_m = (
        pre.wall(pre.table.time(decode_seqs=0, decode_context_sum=0.0, chunks=[(0, isl)] * m, outputs=m).total_s, m)
        if m > 1
        else s_p
    )
    x_prefill = p.engines * m / t_m
    page = dec.eng.page_size
    if dec.eng.name in DECODE_RESERVES_FIRST:
        # its requests hold their tokens so far (on average the prompt and half the output) and a headroom each
        fit = int(dec.kv_tokens // (isl + osl / 2 + dec.eng.reserved_decode_tokens))
    else:
        fit = dec.kv_tokens // (page * -(-(isl + osl) // page))  # requests whose pages a decode worker holds
    cap = max(1, min(dec.eng.max_num_seqs, fit))

    grid = np.unique(np.concatenate([np.geomspace(1, cap, 64), np.arange(1, min(cap, 16) + 1)]))
    taus = dec.wall(np.array([float(dec.table.decode_run(b, b * ctx, 1)[0]) for b in grid]), grid)

    def tau(b: float) -> float:
        return float(np.interp(min(max(b, 1.0), cap), grid, taus))

    def occupancy(x: float) -> float:
        """Sequences per decode worker at throughput x: the least b >= 1 with b = x k tau(b) / D (Little's law),
        the limit where none is."""
        gap = grid - x * k * taus / d.engines
        if gap[0] >= 0:
            return max(x * k * taus[0] / d.engines, 0.0)
        up = np.nonzero(gap >= 0)[0]
        if not up.size:
            return float(cap)
        i = up[0]
        w = -gap[i - 1] / (gap[i] - gap[i - 1])
        return float(grid[i - 1] + w * (grid[i] - grid[i - 1]))

    x_decode = d.engines * cap / (k * tau(cap)) if k else float("inf")
    x = concurrency / (s_p + transfer_s + k * tau(1.0))
    for _ in range(100):
        b = occupancy(x)
        new = concurrency / (s_p + transfer_s + k * tau(b))
        if abs(new - x) <= 1e-9 * new:
            break
        x = 0.5 * (x + new)
    x = min(x, x_prefill, x_decode)
    b = occupancy(x)
    slack = max(0.0, concurrency / x - (s_p + transfer_s + k * tau(b)))
    # the clients wait before the prefill where it binds, or where the decode pool's pages bind and its engine
    # reserves them before the prefill; for a decode slot (a sequence limit), after the first token
    before_prefill = x_prefill <= x_decode or (dec.eng.name in DECODE_RESERVES_FIRST and fit < dec.eng.max_num_seqs)
    wait_p, wait_d = (slack, 0.0) if before_prefill else (0.0, slack)
    front = pre.request_s
    # an overlap scheduler plans a worker's next iteration while one runs: a request that finds the worker busy
    # joins an iteration later. A decode worker at b >= 1 is always busy; a prefill worker's queueing below its
    # capacity, that lag's included, is left out like the rest of it (the TTFT here is a lower bound)
    late_d = dec.eng.lag * tau(b) if b >= 1 else 0.0
    ttft = s_p + wait_p + transfer_s + front
    tpot = tau(b) + ((wait_d + late_d) / k if k else 0.0)
    e2e = ttft + k * tpot

    def means(v: float) -> Stats:
        return Stats(mean=v, median=v, p90=v, p99=v)

    return {
        "ttft": means(ttft),
        "tpot": means(tpot),
        "e2e": means(e2e),
        "queue_s": wait_p,
        "prefill_s": s_p,
        "requests_per_s": x,
        "per_user": osl / e2e,
        "waits": None,
        "most": saturation(x_prefill, x_decode),
        "prefill": {
            "mean_batch": 1.0 if x < x_prefill else float(m),
            "iterations": None,
            "busy_share": min(1.0, x * s_p / p.engines) if x < x_prefill else 1.0,
        },
        "decode": {"mean_batch": b, "iterations": None, "busy_share": min(1.0, b)},
    }


def saturation(x_prefill: float, x_decode: float) -> tuple[float, str]:
    """The most requests per second a disaggregated deployment completes, the lesser of its pools' (each busy all
    the time: :func:`steady_state`), and which pool that is."""
    return (x_prefill, "prefill pool") if x_prefill <= x_decode else (x_decode, "decode pool")


def _groups(pool: Pool) -> str:
    return f"{pool.attention_dp} attention data parallel groups of " if pool.attention_dp > 1 else ""


def _scheduled(eng) -> str:
    """When an engine plans its iterations, in words."""
    return (
        "scheduled while the one before runs (a request that comes during iteration n joins n+2)"
        if eng.lag
        else "scheduled as the one before ends (a request that comes during iteration n joins n+1)"
    )


def _assumptions(
    pre,
    dec,
    p: Pool,
    d: Pool,
    transfer: KvTransfer,
    concurrency,
    request_rate,
    warmup,
    evaluator: str,
    burstiness: float = 1.0,
) -> list[str]:
    load = pool_assumptions(dec, "simulation", concurrency, request_rate, warmup, burstiness=burstiness)[2]
    admitted = (
        f"whose prompt's pages the worker reserved before its prefill (SGLang's bootstrap pre-allocation), "
        "admitting it where the worker can still hand out the prompt and a headroom of "
        f"{dec.eng.reserved_decode_tokens:,} tokens beside the headroom of every request it holds; a request "
        "that finds no decode worker with room waits before its prefill, in TTFT; the running requests grow a "
        "token a step, and where the next step does not fit the one with the fewest tokens out is retracted "
        "(its cache freed) and resumes first once it fits"
        if dec.eng.name in DECODE_RESERVES_FIRST
        else "and pages for its whole context (reserved: no preemption)"
    )
    return [
        f"disaggregated: {p.workers} prefill worker(s) of {_groups(p)}{p.tp} x {pre.pr.hw.id} and {d.workers} decode "
        f"worker(s) of {_groups(d)}{d.tp} x {dec.pr.hw.id}, each group an engine {pre.eng.name} {pre.eng.version} "
        "with its defaults for the device where not set",
        f"prefill workers run prompts alone (up to {pre.eng.max_num_seqs} sequences, "
        f"{pre.eng.max_num_batched_tokens} tokens an iteration and the {pre.kv_tokens:,} tokens of their KV cache, "
        "a longer prompt in chunks); a request goes to the prefill worker with the fewest prompt tokens to do",
        f"KV cache of a prompt: {transfer.bytes_per_request / 1e6:.1f} MB as the decode pool stores it, "
        f"{transfer.bytes_per_device / 1e6:.1f} MB the most one device sends or receives, over {transfer.link} at "
        f"{transfer.link_bytes_per_s / 1e9:.0f} GB/s one way: {transfer.time_s * 1e3:.2f} ms; every device moves "
        "its own shard at once, and the transfer holds neither pool",
        f"decode workers ({dec.kv_tokens:,} KV tokens each) take a request with a free slot (of "
        f"{dec.eng.max_num_seqs}) {admitted}; the request goes to the decode worker with the fewest requests; its "
        "first token came from the prefill worker",
        load,
        *dec.pr_lines,
        f"per iteration: the engine's fixed cost ({pre.iteration_s * 1e3:.2f} ms){pre.host_line()}; per request: the "
        f"front end's latency ({pre.request_s * 1e3:.2f} ms: {pre.front_end_how}) added to TTFT",
        "TTFT = queueing + prefill + KV transfer + front end; TPOT = (end - first token) / (output tokens - 1)",
        f"prefill workers' iterations {_scheduled(pre.eng)}; decode workers' {_scheduled(dec.eng)}"
        + (
            " (TensorRT-LLM's context servers run without its overlap scheduler: its disaggregated-serving guide)"
            if pre.eng.name in PREFILL_POOL_WITHOUT_OVERLAP
            else ""
        ),
        "iteration-level simulation"
        if evaluator == "simulation"
        else "steady-state closed form (means only: prefill alone or batched when the pool binds, decode at the mean "
        "context, waiting by Little's law past the tighter pool's capacity)",
    ]
