"""The assumptions a served prediction states: the engine and its KV cache, the load as the client sends it, the
groups and replicas evaluated, and how an iteration is priced (:func:`assumptions`)."""

from __future__ import annotations

from functools import lru_cache

from costmodel.core.vocab import ENGINE_TITLES
from costmodel.engine.config import HOST_COSTS_OF
from costmodel.model.assumptions import gemm_classes
from costmodel.price.origin import engine_source


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
        f"({setup.iteration_s * 1e3:.2f} ms{_borrowed(setup.eng.name)}){setup.host_line()}; the front end's latency "
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


@lru_cache(maxsize=64)
def _reference(device_id: str):
    """The shipped profile a device's kernel classes came from, read once."""
    from costmodel.hardware.catalog import load_profile

    return load_profile(device_id)


def _borrowed(engine_name: str) -> str:
    """Whose fitted fixed costs an engine no measured deployment ran takes (:data:`HOST_COSTS_OF`), as a note."""
    other = HOST_COSTS_OF.get(engine_name)
    return (
        f": {ENGINE_TITLES[other]}'s, fitted on its deployments; no {ENGINE_TITLES[engine_name]} deployment was measured"
        if other
        else ""
    )


def kernels_line(pr, eng) -> list[str]:
    """Whose kernels a served prediction's times are: the engine and version whose kernels the device's GEMM class
    was fitted on (:attr:`costmodel.hardware.profile.Efficiency.engines`), the classes the engine modelled runs of
    its own (:attr:`costmodel.hardware.profile.HardwareProfile.engine_kernels`), and whether it runs others (empty
    for a datasheet-only device)."""
    resolved = pr.model.resolved
    origin = resolved.origin.get("gemm") if resolved is not None else None
    if origin is None:
        return []
    own = origin.device == pr.hw.id and pr.hw.efficiency is not None
    fit = pr.hw.efficiency if own else _reference(origin.device).efficiency
    engines = fit.engines if fit is not None else ()
    if not engines:
        return []
    which, ours = " and ".join(engines), ENGINE_TITLES[eng.name]
    line = f"kernel times: {which}'s kernels as timed on {origin.device} (the tables its kernel classes were fitted on)"
    mine = {c: o for c, o in resolved.origin.items() if f" ({eng.name}'s own kernel)" in o.notes}
    if mine:
        where = sorted({o.device for o in mine.values()})
        line += (
            f"; {ours}'s own for {', '.join(sorted(mine))} (fitted on {' and '.join(where)}'s timings of its kernels"
            + ("" if where == [pr.hw.id] else ", carried here by the transfer rule")
            + "), the rest priced as those (carried across engines)"
        )
    elif (src := engine_source(pr.hw, eng.name)) is not None:
        line += (
            f"; {ours}'s own kernels were timed on {src.id} (docs/validation.md), and its served runs here are priced "
            "with these (carried across engines)"
        )
    elif not any(e.startswith(ours + " ") for e in engines):
        line += f"; {ours} runs kernels of its own, not measured here, priced as those (carried across engines)"
    elif not any(e.startswith(f"{ours} {eng.version}") for e in engines):
        line += f"; the scheduler is {ours} {eng.version}'s, its kernels taken as the fitted version's"
    if (vendor := _reference(origin.device).vendor) != pr.hw.vendor:
        line += (
            f"; carried from {vendor}'s {origin.device} to {pr.hw.vendor}'s {pr.hw.id} by the transfer rule at its peer "
            "generation (costmodel.price.origin.PEER_GENERATIONS): no kernel of its own stack was timed here"
        )
    return [line]
