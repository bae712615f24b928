"""What a served model under load reports (:class:`LoadPrediction`), built from a setup's engine and pricing by
the simulation (:mod:`costmodel.engine.simulate`) and the closed form (:mod:`costmodel.engine.steady`) alike."""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
from pydantic import computed_field

from costmodel.core.reports import DeviceSummary, Report
from costmodel.model.assumptions import gemm_classes
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
        if weights is None:
            q = np.percentile(x, [50, 90, 99])
            return cls(mean=float(x.mean()), median=float(q[0]), p90=float(q[1]), p99=float(q[2]))
        w = np.asarray(weights, float)
        order = np.argsort(x)
        cum = np.cumsum(w[order]) / w.sum()
        q = [float(x[order][np.searchsorted(cum, p)]) for p in (0.5, 0.9, 0.99)]
        return cls(mean=float((x * w).sum() / w.sum()), median=q[0], p90=q[1], p99=q[2])


class EngineSummary(Report):
    name: str
    version: str
    max_num_batched_tokens: int
    max_num_seqs: int
    memory_fraction: float
    page_size: int
    chunked_prefill: bool
    prefix_caching: bool
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
    ttft_band, tpot_band = served_bands(
        eng.name, m.moe is not None, "agg", measured["ttft"].mean, measured["tpot"].mean
    )
    return LoadPrediction(
        hardware=model_hardware(pr),
        model=m.id,
        model_name=m.name,
        engine=EngineSummary(
            name=eng.name,
            version=eng.version,
            max_num_batched_tokens=eng.max_num_batched_tokens,
            max_num_seqs=eng.max_num_seqs,
            memory_fraction=eng.memory_fraction,
            page_size=eng.page_size,
            chunked_prefill=eng.chunked_prefill,
            prefix_caching=eng.prefix_caching,
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
        ),
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
        output_tokens_per_s_per_device=measured["output_tokens_per_s"] / (pr.tp * dp * pr.pp),
        **measured,
        burstiness=burstiness,
        assumptions=[
            *assumptions(setup, evaluator, concurrency, request_rate, warmup, in_flight, burstiness),
            served_assumption(ttft_band, pr.hw.id),
        ],
    )


def _group_line(setup) -> list[str]:
    dp, replicas = setup.pr.dp, setup.replicas
    out = (
        [
            f"attention data parallel: {dp} engines of {setup.pr.tp} device(s), each with 1/{dp} of the clients "
            "(or of the request rate) and of the requests; one is evaluated and the throughput counts all"
        ]
        if dp > 1
        else []
    )
    return out + (
        [
            f"data parallel: {replicas} replicas of the deployment behind a router, each with 1/{replicas} of "
            "the clients (or of the request rate) and of the requests, sharing nothing; one is evaluated and "
            "the throughput counts all"
        ]
        if replicas > 1
        else []
    )


def open_loop_line(request_rate: float, burstiness: float, evaluator: str) -> str:
    """How an open loop's requests are sent, as vLLM's bench serve sends them
    (:func:`costmodel.engine.load.arrival_times`)."""
    if burstiness == 1:
        kind = "Poisson arrivals"
    elif burstiness == float("inf"):
        kind = "evenly spaced arrivals"
    else:
        kind = (
            f"arrivals with gamma-distributed gaps of shape {burstiness:g} "
            f"({'burstier' if burstiness < 1 else 'more even'} than Poisson)"
        )
    return (
        f"open loop: {kind} at {request_rate:g} requests/s, the times scaled so the last request goes at "
        "requests / rate, as vLLM's bench serve sends them"
        + (
            "; the closed form's means do not depend on how the arrivals bunch"
            if evaluator == "steady-state" and burstiness != 1
            else ""
        )
    )


def assumptions(
    setup, evaluator: str, concurrency, request_rate, warmup: int = 0, in_flight=None, burstiness: float = 1.0
) -> list[str]:
    eng = setup.eng
    load = (
        f"closed loop: {concurrency} clients start at time 0, each sends its next request when the last one finishes"
        if concurrency is not None
        else open_loop_line(request_rate, burstiness, evaluator)
    )
    if in_flight is not None:  # fewer connections than clients (costmodel.engine.served.serve)
        load += (
            f"; the benchmark client holds {in_flight} connections: at most {in_flight} requests in flight, the "
            "others waiting in the client with their clock running (TTFT and end-to-end include the wait)"
        )
    return [
        f"engine {eng.describe()}",
        f"KV cache: {setup.kv_tokens:,} tokens ({setup.kv_budget / 1e9:.1f} GB per device after weights of "
        f"{setup.weights / 1e9:.1f} GB), {setup.kv_per_token:.0f} bytes per token per device, in "
        f"{setup.pr.kv_dtype}; "
        + (
            f"the routed experts' weights in {setup.pr.weight_dtype}, the rest in {setup.pr.dtype}"
            if setup.pr.precision.experts_only
            else f"weights in {setup.pr.weight_dtype}"
        )
        + (f", GEMMs at the {setup.pr.gemm_dtype} peak ({gemm_classes(setup.pr)})" if setup.pr.gemm_dtype else ""),
        load,
        *_group_line(setup),
        *setup.pr_lines,
        "continuous batching: each iteration runs the running sequences' decode tokens and prefill chunks of "
        "waiting requests within the token budget; its time is the model step priced for that mix (prefill "
        "tokens at their positions, decode tokens at theirs) plus the engine's fixed cost per iteration "
        f"({setup.iteration_s * 1e3:.2f} ms){setup.host_line()}; the front end's latency "
        f"({setup.request_s * 1e3:.2f} ms: HTTP, tokenization, the first token streamed back; {setup.front_end_how}) "
        "is added to each TTFT "
        "and end-to-end time; it does not hold the engine (a client's next request reaches the engine when its last "
        "one finishes there)",
        "TPOT per request: (end - first token) / (output tokens - 1), as benchmark clients report it; means over "
        + (f"the requests after {warmup} warm-up requests" if warmup else "all requests, the first wave included"),
        "iteration-level simulation"
        if evaluator == "simulation"
        else "steady-state closed form (means only: every running sequence at the mean context, prefill spread evenly)",
    ]
