"""The assumptions a served prediction states: the engine and its KV cache, the load as the client sends it, the
groups and replicas evaluated, and how an iteration is priced (:func:`assumptions`)."""

from __future__ import annotations

from costmodel.model.assumptions import gemm_classes


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
        *([setup.drafting.describe()] if getattr(setup, "drafting", None) is not None else []),
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
