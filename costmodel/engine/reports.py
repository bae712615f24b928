"""What a served model under load reports (:class:`LoadPrediction`), built from a setup's engine and pricing by
the simulation (:mod:`costmodel.engine.simulate`) and the closed form (:mod:`costmodel.engine.steady`) alike."""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
from pydantic import Field, computed_field

from costmodel.core.reports import DeviceSummary, Report
from costmodel.engine.energy import RunEnergy, dollars, energy_line, per_output, simulated_energy
from costmodel.engine.report_lines import assumptions
from costmodel.model.reports import model_hardware
from costmodel.price.bands import Band, served_assumption
from costmodel.price.bands import served as served_bands


class Stats(Report):
    mean: float
    median: float
    p90: float
    p99: float

    @classmethod
    def of(cls, x, weights=None) -> Stats:
        x = np.asarray(x, float)
        if x.size == 0:
            return cls(mean=0.0, median=0.0, p90=0.0, p99=0.0)
        q = percentiles(x, (50, 90, 99), weights)
        w = None if weights is None else np.asarray(weights, float)
        mean = float(x.mean()) if w is None else float((x * w).sum() / w.sum())
        return cls(mean=mean, median=q["p50"], p90=q["p90"], p99=q["p99"])


def percentiles(x, ps, weights=None) -> dict[str, float]:
    """``{"p50": ..., "p99.9": ...}`` of ``x`` at the percentiles ``ps`` (0-100), as :meth:`Stats.of` takes them:
    numpy's linear interpolation, or the weighted value where ``weights`` (an inter-token latency per token)."""
    x = np.asarray(x, float)
    names = [f"p{p:g}" for p in ps]
    if x.size == 0:
        return dict.fromkeys(names, 0.0)
    if weights is None:
        return {n: float(v) for n, v in zip(names, np.percentile(x, list(ps)))}
    w = np.asarray(weights, float)
    order = np.argsort(x)
    cum = np.cumsum(w[order]) / w.sum()
    return {n: float(x[order][min(np.searchsorted(cum, p / 100), x.size - 1)]) for n, p in zip(names, ps)}


class EngineSummary(Report):
    name: str
    version: str
    max_num_batched_tokens: int
    max_num_seqs: int
    memory_fraction: float
    page_size: int
    chunked_prefill: bool
    prefix_caching: bool
    # a request finds the whole KV pages another's prefill left (every engine's default but ATOM's)
    reuse_prefix: bool
    async_scheduling: bool
    mixes_prefill_and_decode: bool
    reserves_output: bool
    iteration_overhead_s: float
    request_overhead_s: float
    host_per_layer_s: float  # the host's time per iteration: per layer, and per layer and running sequence
    host_per_layer_sequence_s: float
    kv_cache_tokens: int
    kv_cache_bytes_per_token: float
    source: str


class TimeSplit(Report):
    prefill_s: float
    decode_s: float
    comm_s: float
    overhead_s: float


class LoadPrediction(Report):
    """A served model under load. ``ttft_s`` and ``tpot_s`` are the means a benchmark client reports."""

    hardware: DeviceSummary
    model: str
    model_name: str
    engine: EngineSummary
    evaluator: Literal["simulation", "steady-state"]
    concurrency: int | None
    request_rate: float | None
    num_requests: int
    input_len: float
    output_len: float
    tp: int
    attention_dp: int = 1
    pipeline_parallel: int = 1
    replicas: int = 1  # data parallel: engines behind a router, each with an even share of the load
    weight_dtype: str | None = None  # the projection weights' storage as priced
    kv_dtype: str | None = None  # the KV cache's dtype as priced
    burstiness: float = 1.0  # an open loop's arrivals: the gamma shape of their gaps (1: Poisson)
    ttft_s: float
    tpot_s: float
    e2e_s: float
    ttft_band: Band | None = None  # where a benchmark's mean TTFT is expected to fall (costmodel.price.bands.served)
    tpot_band: Band | None = None
    ttft: Stats
    tpot: Stats
    itl: Stats
    e2e: Stats
    requests_per_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_device: float
    output_tokens_per_s_per_user: float
    mean_batch: float
    max_batch: int
    kv_use_max: float
    preemptions: int
    prefill_iteration_share: float
    iterations: int
    time_split: TimeSplit
    assumptions: list[str]
    # open loop: the most requests per second the deployment completes, every sequence it holds running
    # (costmodel.engine.steady.saturation), that many sequences per engine and what limits them; overloaded: the arrivals
    # outpace it, so the queue grows as long as they come and the TTFT grows with num_requests
    saturation_requests_per_s: float | None = None
    saturation_sequences: int | None = None
    saturation_binds: str | None = None
    overloaded: bool = False
    # vllm bench serve's goodput: the requests a second meeting every objective (simulated runs only: the closed
    # form has means, not requests); the objectives, metric -> seconds
    goodput_requests_per_s: float | None = None
    goodput_objectives: dict[str, float] | None = None
    # vllm bench serve's --metric-percentiles: metric (ttft, tpot, itl, e2el) -> "pNN" -> seconds (simulated runs)
    percentiles: dict[str, dict[str, float]] | None = None
    # with a shared prefix: the share of the prompts' tokens found in the prefix cache (not computed)
    prefix_hit_rate: float | None = None
    # energy (costmodel.engine.energy): one device's mean power over the run, every device's energy over the output
    # tokens and the requests, output tokens per joule; with a price per GPU-hour, dollars per million tokens
    power_w: float | None = None
    energy_j_per_output_token: float | None = None
    energy_j_per_output_token_range: tuple[float, float] | None = None
    energy_j_per_request: float | None = None
    output_tokens_per_j: float | None = None
    usd_per_million_output_tokens: float | None = None
    usd_per_million_tokens: float | None = None
    price_per_gpu_hour: float | None = None
    energy: RunEnergy | None = None
    # a simulated run iteration by iteration (SimResult.timeline), where serve() was asked for it: not in the JSON,
    # which it would outgrow
    timeline: dict[str, list] | None = Field(None, exclude=True, repr=False)

    def __str__(self) -> str:
        from costmodel.price.bands import served_label
        from costmodel.render.serving import load_table

        return load_table([self], served_label())

    @computed_field
    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        """Output tokens per second per GPU, as load curves and recommendations state it (every device here is a
        GPU): ``output_tokens_per_s_per_device``."""
        return self.output_tokens_per_s_per_device


class Saturation(NamedTuple):
    """The most requests per second one engine completes (``requests_per_s``), with ``sequences`` running, the
    most it holds at once, and what limits them (``binds``): :func:`costmodel.engine.steady.saturation`."""

    requests_per_s: float
    sequences: int
    binds: str


def engine_summary(eng, setup) -> EngineSummary:
    """The engine a served prediction ran, as its report states it: settings, fitted costs, KV cache."""
    return EngineSummary(
        name=eng.name,
        version=eng.version,
        max_num_batched_tokens=eng.max_num_batched_tokens,
        max_num_seqs=eng.max_num_seqs,
        memory_fraction=eng.memory_fraction,
        page_size=eng.page_size,
        chunked_prefill=eng.chunked_prefill,
        prefix_caching=eng.prefix_caching,
        reuse_prefix=eng.reuse_prefix,
        async_scheduling=eng.async_scheduling,
        mixes_prefill_and_decode=eng.mixes,
        reserves_output=eng.reserve_output,
        iteration_overhead_s=setup.iteration_s,
        request_overhead_s=setup.request_s,
        host_per_layer_s=setup.layer_s,
        host_per_layer_sequence_s=setup.layer_seq_s,
        kv_cache_tokens=setup.kv_tokens,
        kv_cache_bytes_per_token=setup.kv_per_token,
        source=eng.source,
    )


def load_report(
    setup,
    evaluator: str,
    concurrency,
    request_rate,
    *,
    warmup: int = 0,
    in_flight: int | None = None,
    most: Saturation | None = None,
    burstiness: float = 1.0,
    notes: tuple = (),
    energy: RunEnergy | None = None,
    **measured,
) -> LoadPrediction:
    """A report of what an evaluator ``measured`` (the load's own fields of :class:`LoadPrediction`: the
    latency statistics, throughput, batch, KV use and time split), with the setup's device, engine and
    assumptions; the means at the top are the statistics' means. ``most``: one engine's saturation, for an open
    loop (whether its arrivals overload it)."""
    m, pr, eng = setup.m, setup.pr, setup.eng
    # the groups of attention data parallel and the replicas: one was evaluated, all are reported
    dp = pr.dp * setup.replicas
    if most is not None:  # open loop: does one engine keep up with its share of the arrivals?
        measured |= {
            "saturation_requests_per_s": most.requests_per_s * dp,
            "saturation_sequences": most.sequences,
            "saturation_binds": most.binds,
            "overloaded": request_rate >= most.requests_per_s,
        }
    if dp > 1:
        concurrency = concurrency * dp if concurrency is not None else None
        in_flight = in_flight * dp if in_flight is not None else None
        request_rate = request_rate * dp if request_rate is not None else None
        measured = measured | {k: measured[k] * dp for k in ("num_requests", "requests_per_s", "output_tokens_per_s")}
        if measured.get("goodput_requests_per_s") is not None:
            measured["goodput_requests_per_s"] *= dp
    devices = pr.tp * dp * pr.pp
    per_device = measured["output_tokens_per_s"] / devices
    all_per_device = measured["requests_per_s"] * (measured["input_len"] + measured["output_len"]) / devices
    price = setup.price_per_gpu_hour
    if energy is not None:
        measured |= per_output(energy.power_w, energy.power_w_range, per_device, measured["requests_per_s"] / devices)
    measured |= dollars(price, per_device, all_per_device)
    ttft_band, tpot_band = served_bands(
        eng.name, m.moe is not None, "agg", measured["ttft"].mean, measured["tpot"].mean
    )
    return LoadPrediction(
        hardware=model_hardware(pr),
        model=m.id,
        model_name=m.name,
        weight_dtype=pr.weight_dtype,
        kv_dtype=pr.kv_dtype,
        engine=engine_summary(eng, setup),
        evaluator=evaluator,
        concurrency=concurrency,
        request_rate=request_rate,
        tp=pr.tp,
        attention_dp=pr.dp,
        pipeline_parallel=pr.pp,
        ttft_s=measured["ttft"].mean,
        tpot_s=measured["tpot"].mean,
        e2e_s=measured["e2e"].mean,
        ttft_band=ttft_band,
        tpot_band=tpot_band,
        replicas=setup.replicas,
        output_tokens_per_s_per_device=per_device,
        **measured,
        burstiness=burstiness,
        energy=energy,
        price_per_gpu_hour=price,
        assumptions=[
            *assumptions(setup, evaluator, concurrency, request_rate, warmup, in_flight, burstiness),
            *notes,
            energy_line(energy, pr.hw),
            served_assumption(ttft_band, pr.hw.id),
        ],
    )


def report_of(
    setup,
    res,
    concurrency,
    request_rate,
    prompts,
    outputs,
    warmup: int = 0,
    in_flight: int | None = None,
    most=None,
    burstiness: float = 1.0,
    goodput: tuple = (),
    ps: tuple = (),
    timeline: bool = False,
) -> LoadPrediction:
    """The report of a simulated run of ``setup`` (:class:`costmodel.engine.served.Setup`); the first ``warmup``
    requests ran but are left out of the statistics
    (``in_flight``: the client's connections, where fewer than its clients: :func:`serve`; ``most``: an open
    loop's saturation, :func:`costmodel.engine.steady.saturation`; ``goodput``: (metric, seconds) objectives whose
    met requests a second are counted)."""
    kept = res.after(warmup)
    prompts, outputs = prompts[warmup:], outputs[warmup:]
    e2e = kept.e2e + setup.request_s
    span = float(kept.finish.max() - kept.arrival.min())
    met = _meets(kept, setup.request_s, goodput)
    times = np.concatenate([t for t, _ in res.iteration_s])
    decode_tokens = np.concatenate([np.full(len(t), d, float) for t, d in res.iteration_s])
    stepped = decode_tokens > 0  # an iteration's gap is an inter-token latency of each of its decode tokens
    energy = simulated_energy(setup, res, prompts, outputs)
    return load_report(
        setup,
        "simulation",
        concurrency,
        request_rate,
        warmup=warmup,
        in_flight=in_flight,
        most=most,
        burstiness=burstiness,
        num_requests=len(prompts),
        input_len=float(np.mean(prompts)),
        output_len=float(np.mean(outputs)),
        ttft=Stats.of(kept.ttft + setup.request_s),
        tpot=Stats.of(kept.tpot),
        itl=Stats.of(times[stepped], decode_tokens[stepped]),
        e2e=Stats.of(e2e),
        requests_per_s=len(prompts) / span,
        output_tokens_per_s=float(np.sum(outputs)) / span,
        output_tokens_per_s_per_user=float(np.mean(outputs / np.maximum(e2e, 1e-12))),
        mean_batch=res.seq_iterations / max(res.iterations, 1),
        max_batch=res.seqs_max,
        kv_use_max=res.kv_pages_max / max(res.kv_pages, 1),
        preemptions=res.preemptions,
        prefill_iteration_share=res.prefill_iterations / max(res.iterations, 1),
        iterations=res.iterations,
        time_split=TimeSplit(
            prefill_s=res.prefill_s, decode_s=res.decode_s, comm_s=res.comm_s, overhead_s=res.overhead_s
        ),
        goodput_requests_per_s=float(met.sum()) / span if goodput else None,
        goodput_objectives={k: float(v) for k, v in goodput} or None,
        percentiles={
            "ttft": percentiles(kept.ttft + setup.request_s, ps),
            "tpot": percentiles(kept.tpot, ps),
            "itl": percentiles(times[stepped], ps, decode_tokens[stepped]),
            "e2el": percentiles(e2e, ps),
        }
        if ps
        else None,
        timeline=res.timeline(times) if timeline else None,
        energy=energy,
        **_prefix_report(setup, res),
    )


def _prefix_report(setup, res) -> dict:
    """A run with a shared prefix: its hit rate (prompt tokens found cached over all prompt tokens admitted) and
    what the cache did, as an assumption."""
    if not res.prefix_len and res.turns == 1:
        return {}
    from costmodel.engine.config import REUSE_PREFIX

    found = res.prefix_hit_tokens
    rate = found / max(found + res.prefill_tokens, 1)
    what = (
        f"the first {res.prefix_len} tokens"
        if res.prefix_len
        else f"their conversation so far (conversations of {res.turns} turns, each turn's prompt the turns before "
        "and its own input, sent as the turn before finishes)"
    )
    how = (
        f"{REUSE_PREFIX}: {res.prefix_hits} admissions found {what} cached ("
        f"{found:,} tokens, {rate:.1%} of the prompts' tokens, not computed; their chunks' attention still reads "
        f"them); the prefix evicted {res.prefix_evictions} time(s) when no running request held it and pages ran out"
        if setup.eng.reuse_prefix
        else "prefix caching off: every prompt computed whole"
    )
    return {"prefix_hit_rate": rate, "notes": (how,)}


def _meets(kept, front_s: float, goodput: tuple) -> np.ndarray:
    """Which requests meet every (metric, seconds) objective, as vllm bench serve counts goodput: TTFT (the front
    end's latency included), TPOT (a request of one output token meets any), end-to-end latency."""
    ok = np.ones(len(kept.arrival), bool)
    more = kept.output > 1
    tpot = np.zeros(len(kept.arrival))
    tpot[more] = kept.tpot
    values = {"ttft": kept.ttft + front_s, "tpot": tpot, "e2el": kept.e2e + front_s}
    for metric, limit in goodput:
        ok &= values[metric] <= limit
    return ok
