"""What every view of the page is built from: the engine flags, the requests and the served run a request asks
for (the library's types from the request's typed fields, as the command line builds them from its options), and
the numbers, rows and columns (units in their headers) the page lays out."""

from __future__ import annotations

from costmodel.web.requests import ViewRequest


def engine_flags(req: ViewRequest):
    from costmodel.engine.config import EngineFlags

    return EngineFlags(
        max_num_batched_tokens=req.max_num_batched_tokens,
        max_num_seqs=req.max_num_seqs,
        memory_fraction=req.gpu_memory_utilization,
        page_size=req.block_size,
        chunked_prefill=req.enable_chunked_prefill,
        prefix_caching=req.enable_prefix_caching,
        max_model_len=req.max_model_len,
        async_scheduling=req.async_scheduling,
        engine_version=req.engine_version,
    )


def requests_of(req: ViewRequest, **load):
    from costmodel.engine.load import Load

    return Load(
        req.input_len,
        req.output_len,
        num_requests=req.num_requests,
        warmup_requests=req.warmup_requests,
        burstiness=req.burstiness,
        input_dist=req.length_dist,
        output_dist=req.length_dist,
        spread=req.spread,
        client_connections=req.client_connections,
        prefix_len=req.prefix_len,
        prefix_share=(req.prefix_share or 1.0) if req.prefix_len else 0.0,
        turns=req.turns,
        **load,
    )


def served_run(req: ViewRequest, m, hw, timeline: bool = False, **load):
    """One served run at ``load`` (concurrency or request_rate); ``timeline``: its iterations kept for a chart."""
    from costmodel.engine.layout import Layout
    from costmodel.engine.served import serve

    layout = Layout(
        tp=req.tp,
        replicas=req.replicas,
        expert_parallel=req.expert_parallel,
        attention_dp=req.attention_dp,
        pipeline_parallel=req.pipeline_parallel_size,
    )
    return serve(m, hw, requests_of(req, **load), layout=layout, timeline=timeline, **engine_kw(req))


def engine_kw(req: ViewRequest) -> dict:
    """The engine, its flags, the dtypes, the evaluator, the front end and speculative decoding: what serve() and
    serve_disaggregated() take alike."""
    from costmodel.engine.speculation import parse

    return dict(
        engine_name=req.engine,
        flags=engine_flags(req),
        weight_dtype=req.weight_dtype,
        kv_dtype=req.kv_dtype,
        evaluator=req.evaluator or "simulation",
        frontend=req.frontend,
        speculation=parse(req.speculative_config, req.acceptance_length),
    )


def loads_of(req: ViewRequest) -> list[dict]:
    """The loads asked for, one dict of Load's keywords each."""
    if req.request_rate:
        return [{"request_rate": r} for r in req.request_rate]
    return [{"concurrency": c} for c in req.concurrency]


OP_COLUMNS = (
    ("phase", "phase", ""),
    ("section", "section", ""),
    ("name", "op", ""),
    ("time_us", "time", "µs"),
    ("gflop", "work", "GFLOP"),
    ("mb", "moved", "MB"),
    ("intensity", "intensity", "FLOP/B"),
    ("bound", "bound", ""),
)


def op_row(o: dict) -> dict:
    return {
        "section": o["section"],
        "name": o["name"],
        "time_us": o["time_s"] * 1e6,
        "gflop": o["flops"] / 1e9,
        "mb": o["bytes"] / 1e6,
        "intensity": o["flops"] / o["bytes"] if o["bytes"] else None,
        "bound": o["bound"],
    }


SERVED_COLUMNS = (
    ("load", "load", "clients or req/s"),
    ("ttft_ms", "TTFT mean", "ms"),
    ("ttft_p90_ms", "TTFT p90", "ms"),
    ("tpot_ms", "TPOT mean", "ms"),
    ("tpot_p90_ms", "TPOT p90", "ms"),
    ("tok_s_gpu", "throughput", "tok/s/GPU"),
    ("tok_s_user", "speed", "tok/s/user"),
    ("req_s", "requests", "req/s"),
    ("mean_batch", "mean batch", "seqs"),
    ("kv_use_max", "KV use, most", "%"),
    ("preemptions", "preemptions", ""),
    ("power_w", "power", "W/GPU"),
    ("j_token", "energy", "J/output token"),
)


def served_row(p) -> dict:
    return {
        "load": p.concurrency or p.request_rate,
        "ttft_ms": p.ttft_s * 1e3,
        "ttft_p90_ms": p.ttft.p90 * 1e3,
        "tpot_ms": p.tpot_s * 1e3,
        "tpot_p90_ms": p.tpot.p90 * 1e3,
        "tok_s_gpu": p.output_tokens_per_s_per_gpu,
        "tok_s_user": p.output_tokens_per_s_per_user,
        "req_s": p.requests_per_s,
        "mean_batch": p.mean_batch,
        "kv_use_max": p.kv_use_max * 100,
        "preemptions": p.preemptions,
        "power_w": p.power_w,
        "j_token": p.energy_j_per_output_token,
    }


def served_summary(p) -> list[dict]:
    return [
        number("ttft_ms", "TTFT mean", "ms", p.ttft_s * 1e3),
        number("tpot_ms", "TPOT mean", "ms", p.tpot_s * 1e3),
        number("tok_s_gpu", "throughput", "tok/s/GPU", p.output_tokens_per_s_per_gpu),
        number("tok_s_user", "speed", "tok/s/user", p.output_tokens_per_s_per_user),
        number("kv_use_max", "KV use, most", "%", p.kv_use_max * 100),
        *energy_summary(p),
    ]


def energy_summary(p) -> list[dict]:
    """A served run's power per GPU and energy per output token, where its device states a board power."""
    if p.energy_j_per_output_token is None:
        return []
    return [
        number("power_w", "power", "W/GPU", p.power_w),
        number("j_token", "energy", "J/output token", p.energy_j_per_output_token),
    ]


def context_of(req: ViewRequest) -> int:
    """A model step's cached positions: as given, else the command line's default."""
    from costmodel.core.vocab import DEFAULTS

    return req.context or DEFAULTS["context"]


def seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def number(key: str, label: str, unit: str, value) -> dict:
    return {"key": key, "label": label, "unit": unit, "value": value}


def table(name: str, rows: list[dict], columns) -> dict:
    """A table: its columns (key, label, unit) and its rows (only those columns)."""
    cols = [{"key": k, "label": label, "unit": unit} for k, label, unit in columns]
    return {"name": name, "columns": cols, "rows": [{k: r.get(k) for k, _, _ in columns} for r in rows]}


def load_words(p) -> str:
    load = f"{p.concurrency} clients" if p.concurrency else f"{p.request_rate:g} requests/s"
    return f"{load}, requests of {p.input_len:g} + {p.output_len:g} tokens"
