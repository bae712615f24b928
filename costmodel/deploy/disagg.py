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

from dataclasses import replace

from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.core.vocab import DEFAULTS
from costmodel.deploy.disagg_energy import with_energy
from costmodel.deploy.disagg_reports import DisaggPrediction, KvTransfer, PoolSummary, TtftSplit
from costmodel.deploy.disagg_steady import steady_state
from costmodel.deploy.pools import Pool, simulated
from costmodel.deploy.workers import DECODE_RESERVES_FIRST, PREFILL_POOL_WITHOUT_OVERLAP
from costmodel.engine.config import EngineFlags, engine
from costmodel.engine.limits import model_len
from costmodel.engine.load import Load, checked_load, mean_length
from costmodel.engine.report_lines import assumptions as pool_assumptions
from costmodel.engine.served import Setup, checkpoint_kv_dtype
from costmodel.hardware.power import with_limit
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
            hw_p.group_bandwidth(2),  # each device to its counterpart
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
    engine_name: str = DEFAULTS["engine"],
    flags: EngineFlags = EngineFlags(),
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    timing: str = "graph",
    kv_link_bytes_per_s: float | None = None,
    overheads: dict | None = None,
    evaluator: str = "simulation",
    check: bool = False,
    frontend: str = "dynamo",
    speculation=None,
    power_limit_w: float | None = None,
    price_per_gpu_hour: float | None = None,
) -> DisaggPrediction:
    """``load``'s requests served by ``prefill.workers`` prefill engines and ``decode.workers`` decode engines of
    ``engine_name`` (each pool on its ``gpu``, else ``hw``; each pool's limits on the :class:`Pool`, the engine's
    other ``flags`` for both). ``kv_link_bytes_per_s`` overrides the link the KV cache crosses (one way, per device).
    ``evaluator`` "steady-state": the closed form of :func:`steady_state` (means, a closed loop only). ``frontend``:
    the front end the requests pass (:data:`costmodel.engine.served.FRONTENDS`), its latency added to TTFT. Lengths
    drawn as :func:`costmodel.engine.load.lengths` draws them (the closed form takes their means; each request's KV
    transfer is priced at the mean prompt's). ``speculation`` and a load that reuses the prefix cache are refused:
    the pools do not model them."""
    if evaluator not in ("simulation", "steady-state"):
        raise CostModelError(f"unknown evaluator {evaluator!r}; known: simulation, steady-state")
    hw = with_limit(hw, power_limit_w)
    n = checked_load(m, hw, load)
    if speculation is not None or load.reuses_cache:
        raise CostModelError(
            "speculative decoding, a shared prefix and conversations are simulated in one aggregated engine; "
            "disaggregated pools do not model the prefix cache or speculative decoding"
        )
    if evaluator == "steady-state" and load.concurrency is None:
        raise CostModelError(
            "the steady-state form of disaggregated serving takes a concurrency (a closed loop); "
            "simulate a request rate"
        )
    _checked(flags, prefill, decode, kv_link_bytes_per_s)
    prefill, decode = (replace(p, gpu=with_limit(p.gpu, power_limit_w)) if p.gpu else p for p in (prefill, decode))
    price = checks.number("price_per_gpu_hour", price_per_gpu_hour, optional=True)  # USD
    kv_dtype = kv_dtype or checkpoint_kv_dtype(m, engine_name, weight_dtype)
    prompts, outputs = load.lengths(n + load.warmup_requests)
    mean_in = mean_length(prompts)
    pre, dec = pool_setups(
        m,
        hw,
        prefill,
        decode,
        engine_name,
        flags,
        prompts,
        outputs,
        timing,
        weight_dtype,
        kv_dtype,
        overheads,
        frontend,
    )
    for setup in (pre, dec):
        model_len(setup.eng, setup, prompts, outputs)
    if not pre.eng.chunked_prefill and int(prompts.max()) > pre.eng.max_num_batched_tokens:
        raise CostModelError(
            f"a prompt of {int(prompts.max())} tokens exceeds the prefill workers' token budget "
            f"{pre.eng.max_num_batched_tokens} and chunked prefill is off"
        )
    devices = prefill.devices() + decode.devices()
    transfer = transfer_of(pre, dec, decode, devices, mean_in, kv_link_bytes_per_s)

    got, most = _evaluate(pre, dec, prefill, decode, load, prompts, outputs, transfer, evaluator, check)
    report = _report(m, pre, dec, prefill, decode, load, n, prompts, outputs, transfer, evaluator, got, most)
    return with_energy(report, pre, dec, prefill, decode, got, transfer, price)


def _report(m, pre, dec, prefill: Pool, decode: Pool, load: Load, n, prompts, outputs, transfer, evaluator, got, most):
    """The deployment's report from the evaluation's statistics (:func:`_evaluate`)."""
    summaries = _summaries(pre, dec, prefill, decode, got)
    devices = prefill.devices() + decode.devices()
    concurrency, request_rate, burstiness = load.concurrency, load.request_rate, load.burstiness
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
                pre,
                dec,
                prefill,
                decode,
                transfer,
                concurrency,
                request_rate,
                load.warmup_requests,
                evaluator,
                burstiness,
            ),
            served_assumption(ttft_band, pre.pr.hw.id),
        ],
    )


def _evaluate(
    pre, dec, prefill: Pool, decode: Pool, load: Load, prompts, outputs, transfer: KvTransfer, evaluator, check
):
    """(the report's statistics, an open loop's saturation and what binds it) by the closed form or the simulation."""
    if evaluator == "steady-state":
        got = steady_state(
            pre,
            dec,
            prefill,
            decode,
            concurrency=load.concurrency,
            input_len=mean_length(prompts),
            output_len=mean_length(outputs),
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
            input_len=mean_length(prompts),
            warmup=load.warmup_requests,
            concurrency=load.concurrency,
            request_rate=load.request_rate,
            transfer_s=transfer.time_s,
            seed=load.seed,
            check=check,
            burstiness=load.burstiness,
        )
    most = None
    if load.request_rate is not None:  # an open loop: the most the pools complete (their capacities, the closed form's)
        most = steady_state(
            pre,
            dec,
            prefill,
            decode,
            concurrency=1,
            input_len=mean_length(prompts),
            output_len=mean_length(outputs),
            transfer_s=transfer.time_s,
        )["most"]
    return got, most


def _checked(flags: EngineFlags, prefill: Pool, decode: Pool, kv_link_bytes_per_s) -> None:
    """The engine flags (the pools' limits go on each Pool), the pools and the link's bandwidth, checked."""
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


def pool_engine(engine_name: str, dev: HardwareProfile, pool: Pool, flags: EngineFlags, *, prefill: bool):
    """The engine of one of a pool's workers on ``dev``: its defaults, the ``flags`` and the pool's own limits, which
    take the place of the flags' (a prefill worker of an engine in :data:`PREFILL_POOL_WITHOUT_OVERLAP` without its
    overlap scheduler)."""
    limits = {"max_num_batched_tokens": pool.max_num_batched_tokens, "max_num_seqs": pool.max_num_seqs}
    eng = engine(
        engine_name, capacity_bytes=dev.engine_memory, device_name=dev.name, tp=pool.tp, version=flags.engine_version
    ).with_flags(**(flags.settings() | {k: v for k, v in limits.items() if v is not None}))
    return eng.with_flags(async_scheduling=False) if prefill and engine_name in PREFILL_POOL_WITHOUT_OVERLAP else eng


def pool_setups(
    m, hw, prefill, decode, engine_name, flags, prompts, outputs, timing, weight_dtype, kv_dtype, overheads, frontend
):
    """Each pool's engine on its device, priced (:class:`costmodel.engine.served.Setup`): the prefill pool's and
    the decode pool's."""
    setups = []
    for pool, max_context in ((prefill, int(prompts.max())), (decode, int(prompts.max() + outputs.max()))):
        dev = pool.gpu or hw
        eng = pool_engine(engine_name, dev, pool, flags, prefill=pool is prefill)
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
    return setups


def transfer_of(pre: Setup, dec: Setup, decode: Pool, devices: int, mean_in: int, kv_link_bytes_per_s) -> KvTransfer:
    """The mean prompt's KV cache crossing from the prefill pool to the decode pool: every device sends or
    receives its own shard at once, over the link between them (:func:`kv_link`) or one as given."""
    if kv_link_bytes_per_s is not None:
        link, bw, lat = "as given", float(kv_link_bytes_per_s), 0.0
    else:
        link, bw, lat = kv_link(pre.pr.hw, dec.pr.hw, devices)
    per_device = max(pre.kv_per_token, dec.kv_per_token) * mean_in
    return KvTransfer(
        bytes_per_request=dec.kv_per_token * decode.tp * mean_in,
        bytes_per_device=per_device,
        link=link,
        link_bytes_per_s=bw,
        latency_s=lat,
        time_s=lat + per_device / bw,
    )


def _summaries(pre: Setup, dec: Setup, prefill: Pool, decode: Pool, got: dict) -> list[PoolSummary]:
    """Each pool as the report states it, with the run's (or the closed form's) batch, busy share and iterations."""
    return [
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
