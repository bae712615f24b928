"""What the page shows for one :class:`~costmodel.web.requests.ViewRequest`: the library's report, computed once,
with the figures (:mod:`costmodel.web.charts`), the tables (their units in the headers), the few numbers a
comparison lines up, and the command line that prints the same numbers.

:func:`compute` calls the public Python API (``predict_model``, ``serve``, ``plan``, ``recommend``) with the
request's typed values, as the command line calls it with its options; nothing here parses printed text.
"""

from __future__ import annotations

import contextlib

from costmodel.render import interactive as charts
from costmodel.web.requests import ViewRequest


def compute(req: ViewRequest, progress=None) -> dict:
    """The view ``req`` asks for: ``{"view", "title", "command", "summary", "tables", "charts", "report"}``;
    ``progress(done, total, what)`` is told of a long computation's steps."""
    from costmodel.core.progress import listen
    from costmodel.hardware.catalog import load_profile
    from costmodel.model.presets import load_model, pasted_config

    with contextlib.ExitStack() as stack:
        name = req.model
        if req.config is not None:
            name = stack.enter_context(pasted_config(req.config))
        if progress is not None:
            stack.enter_context(listen(progress))
        m = load_model(name)
        hws = [load_profile(g) for g in req.gpu]
        out = _VIEWS[req.view](req, m, hws)
    return out | {"view": req.view, "command": req.command(), "request": req.used()}


def _flags(req: ViewRequest):
    from costmodel.engine.config import EngineFlags

    return EngineFlags(
        max_num_batched_tokens=req.max_num_batched_tokens,
        max_num_seqs=req.max_num_seqs,
        memory_fraction=req.gpu_memory_utilization,
        page_size=req.block_size,
        chunked_prefill=req.enable_chunked_prefill,
        prefix_caching=req.enable_prefix_caching,
        max_model_len=req.max_model_len,
        engine_version=req.engine_version,
    )


def _requests(req: ViewRequest, **load):
    from costmodel.engine.load import Load

    return Load(req.input_len, req.output_len, num_requests=req.num_requests, burstiness=req.burstiness, **load)


def _served(req: ViewRequest, m, hw, **load):
    """One served run at ``load`` (concurrency or request_rate)."""
    from costmodel.engine.layout import Layout
    from costmodel.engine.served import serve

    layout = Layout(
        tp=req.tp,
        replicas=req.replicas,
        expert_parallel=req.expert_parallel,
        attention_dp=req.attention_dp,
        pipeline_parallel=req.pipeline_parallel_size,
    )
    return serve(
        m,
        hw,
        _requests(req, **load),
        layout=layout,
        engine_name=req.engine,
        flags=_flags(req),
        weight_dtype=req.weight_dtype,
        kv_dtype=req.kv_dtype,
        evaluator=req.evaluator or "simulation",
    )


def _load(req: ViewRequest) -> list[dict]:
    """The loads asked for, one dict of Load's keywords each."""
    if req.request_rate:
        return [{"request_rate": r} for r in req.request_rate]
    return [{"concurrency": c} for c in req.concurrency]


def step_view(req: ViewRequest, m, hws) -> dict:
    """A model's decode step and prefill, op by op, on the first device."""
    from costmodel.model.step import predict_model

    hw = hws[0]
    p = predict_model(
        m,
        hw,
        batch=req.batch,
        context=req.context,
        tp=req.tp,
        weight_dtype=req.weight_dtype,
        kv_dtype=req.kv_dtype,
        expert_parallel=req.expert_parallel,
        attention_dp=req.attention_dp,
    )
    d = p.model_dump(mode="json")
    ops = {phase: d[phase]["ops"] for phase in ("decode", "prefill")}
    rows = [{"phase": phase, **_op_row(o)} for phase, mine in ops.items() for o in mine]
    return {
        "title": f"{m.name} on {hw.name}: one decode step of {req.batch} x {req.context} tokens, and its prefill",
        "summary": [
            _number("tpot_ms", "TPOT", "ms", p.total.tpot_s * 1e3),
            _number("ttft_ms", "TTFT (prefill)", "ms", p.total.ttft_s * 1e3),
            _number("tokens_per_s", "decode tokens/s", "tok/s", p.total.tokens_per_s),
        ],
        "tables": [_table("ops", rows, OP_COLUMNS)],
        "charts": [charts.roofline_chart(d["hardware"], ops), *(charts.ops_chart(ph, o) for ph, o in ops.items())],
        "report": d,
    }


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


def _op_row(o: dict) -> dict:
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
)


def _served_row(p) -> dict:
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
    }


def _served_summary(p) -> list[dict]:
    return [
        _number("ttft_ms", "TTFT mean", "ms", p.ttft_s * 1e3),
        _number("tpot_ms", "TPOT mean", "ms", p.tpot_s * 1e3),
        _number("tok_s_gpu", "throughput", "tok/s/GPU", p.output_tokens_per_s_per_gpu),
        _number("tok_s_user", "speed", "tok/s/user", p.output_tokens_per_s_per_user),
        _number("kv_use_max", "KV use, most", "%", p.kv_use_max * 100),
    ]


def served_view(req: ViewRequest, m, hws) -> dict:
    """One served run: its numbers and its timeline."""
    hw = hws[0]
    p = _served(req, m, hw, **_load(req)[0])
    return {
        "title": f"{m.name} on {hw.name} x{p.tp * p.attention_dp * p.pipeline_parallel * p.replicas}, "
        f"{p.engine.name}: {_load_words(p)}",
        "summary": _served_summary(p),
        "tables": [_table("served", [_served_row(p)], SERVED_COLUMNS)],
        "charts": [charts.timeline_chart(p.timeline)] if p.timeline else [],
        "report": p.model_dump(mode="json"),
    }


def curve_view(req: ViewRequest, m, hws) -> dict:
    """The load curve: one served run per load, in order."""
    from costmodel.core.progress import bar

    hw, loads, points = hws[0], _load(req), []
    with bar(len(loads), "loads") as advance:
        for load in loads:
            points.append(_served(req, m, hw, **load))
            advance()
    dumped = [p.model_dump(mode="json") for p in points]
    top = max(points, key=lambda p: p.output_tokens_per_s_per_gpu)
    return {
        "title": f"{m.name} on {hw.name}, {points[0].engine.name}: load curve of {len(points)} points",
        "summary": [
            _number("peak_tok_s_gpu", "most throughput", "tok/s/GPU", top.output_tokens_per_s_per_gpu),
            _number("peak_at", "at load", "clients or req/s", top.concurrency or top.request_rate),
            _number("tpot_ms_first", "TPOT at the lightest load", "ms", points[0].tpot_s * 1e3),
        ],
        "tables": [_table("curve", [_served_row(p) for p in points], SERVED_COLUMNS)],
        "charts": charts.curve_charts(dumped, f"{hw.id} tp{req.tp} {req.engine}"),
        "report": dumped,
    }


def plan_view(req: ViewRequest, m, hws) -> dict:
    """Every layout on ``gpus`` devices of each kind, under load; the front and the best."""
    from costmodel.deploy.planner import plan

    result = plan(
        m,
        hws,
        devices=req.gpus,
        input_len=req.input_len,
        output_len=req.output_len,
        engine_name=req.engine,
        weight_dtype=req.weight_dtype,
        kv_dtype=req.kv_dtype,
        ttft_s=_s(req.ttft_ms),
        tpot_s=_s(req.tpot_ms),
        max_concurrency=req.max_concurrency,
        flags=_flags(req),
        requests=_requests(req),
    )
    d = result.model_dump(mode="json")
    best = max(result.best or result.front, key=lambda p: p.output_tokens_per_s_per_device)
    columns = (
        ("device", "device", ""),
        ("layout", "layout", ""),
        ("concurrency", "clients", ""),
        ("ttft_ms", "TTFT", "ms"),
        ("tpot_ms", "TPOT", "ms"),
        ("output_tokens_per_s_per_device", "throughput", "tok/s/GPU"),
        ("output_tokens_per_s_per_user", "speed", "tok/s/user"),
        ("meets_targets", "meets targets", ""),
    )
    rows = [p | {"ttft_ms": p["ttft_s"] * 1e3, "tpot_ms": p["tpot_s"] * 1e3} for p in d["front"]]
    return {
        "title": f"{m.name} on {req.gpus} GPUs of {', '.join(h.id for h in hws)}: every layout under load",
        "summary": [
            _number(
                "best_tok_s_gpu",
                f"best ({best.device} {best.layout})",
                "tok/s/GPU",
                best.output_tokens_per_s_per_device,
            ),
            _number("best_tok_s_user", "its speed", "tok/s/user", best.output_tokens_per_s_per_user),
            _number("points", "points priced", "", len(result.points)),
        ],
        "tables": [_table("front", rows, columns)],
        "charts": [charts.plan_chart(d)],
        "report": d,
    }


def recommend_view(req: ViewRequest, m, hws) -> dict:
    """The fewest GPUs that serve the load under the targets, and every candidate searched."""
    from costmodel.deploy.recommend import recommend

    rec = recommend(
        m,
        hws,
        _requests(req, **_load(req)[0]),
        engine_name=req.engine,
        flags=_flags(req),
        ttft_s=_s(req.ttft_ms),
        tpot_s=_s(req.tpot_ms),
        statistic=req.statistic,
        evaluator=req.evaluator,
        price_per_gpu_hour=req.price_per_hour,
        max_gpus=req.max_gpus,
        weight_dtype=req.weight_dtype,
        kv_dtype=req.kv_dtype,
    )
    rows = [c.model_dump(mode="json") for c in rec.candidates]
    columns = (
        ("gpu", "device", ""),
        ("layout", "unit", ""),
        ("max_num_batched_tokens", "token budget", "tokens"),
        ("unit_gpus", "GPUs per unit", ""),
        ("per_unit", "served per unit", "clients or req/s"),
        ("replicas", "units", ""),
        ("gpus", "GPUs", ""),
        ("binds", "what binds", ""),
    )
    ranked = [c for c in rows if c["gpus"]]
    bars = {
        "type": "bar",
        "x": [f"{c['gpu']} {c['layout']}" for c in ranked],
        "y": [c["gpus"] for c in ranked],
        "name": "GPUs needed",
        "hovertemplate": "%{x}: %{y} GPUs<extra></extra>",
    }
    return {
        "title": f"{m.name}: the fewest GPUs of {', '.join(h.id for h in hws)} for the load",
        "summary": [
            _number("gpus", f"GPUs ({rec.gpu} {rec.layout})", "", rec.gpus),
            _number("ttft_ms", "TTFT mean there", "ms", rec.at.ttft_s * 1e3),
            _number("tpot_ms", "TPOT mean there", "ms", rec.at.tpot_s * 1e3),
        ],
        "tables": [_table("candidates", rows, columns)],
        "charts": [charts.figure("candidates", "GPUs each candidate needs", [bars], "candidate", "GPUs")],
        "report": rec.model_dump(mode="json"),
    }


def variants_view(req: ViewRequest, m, hws) -> dict:
    """The model and its MHA, GQA, MQA and MLA versions side by side: the same step, each one's cache."""
    from costmodel.model.requests import with_variants
    from costmodel.model.step import predict_model

    hw = hws[0]
    kw = dict(batch=req.batch, context=req.context, tp=req.tp, weight_dtype=req.weight_dtype, kv_dtype=req.kv_dtype)
    ps = [predict_model(v, hw, **kw) for v in with_variants(m, latent=True)]
    rows = [
        {
            "attention": p.model.attention,
            "tpot_ms": p.total.tpot_s * 1e3,
            "ttft_ms": p.total.ttft_s * 1e3,
            "kv_mb": p.memory.kv_cache_bytes_per_device / 1e6,
            "fits": p.memory.fits,
        }
        for p in ps
    ]
    columns = (
        ("attention", "attention", ""),
        ("tpot_ms", "TPOT", "ms"),
        ("ttft_ms", "TTFT (prefill)", "ms"),
        ("kv_mb", "KV cache per device", "MB"),
        ("fits", "fits", ""),
    )
    names = [r["attention"] for r in rows]
    bars = [
        {
            "type": "bar",
            "name": label,
            "x": names,
            "y": [r[key] for r in rows],
            "yaxis": axis,
            "hovertemplate": "%{x}: %{y:.4g} " + unit + "<extra>" + label + "</extra>",
        }
        for key, label, unit, axis in (("tpot_ms", "TPOT", "ms", "y"), ("kv_mb", "KV cache", "MB", "y2"))
    ]
    chart = charts.figure(
        "variants",
        "the step and the cache of each attention",
        bars,
        "attention",
        "TPOT (ms)",
        yaxis2={"title": {"text": "KV cache (MB)"}, "overlaying": "y", "side": "right"},
        barmode="group",
    )
    return {
        "title": f"{m.name} on {hw.name}: MHA, GQA, MQA and MLA at batch {req.batch} x {req.context} tokens",
        "summary": [_number(f"tpot_ms_{i}", f"TPOT, {r['attention']}", "ms", r["tpot_ms"]) for i, r in enumerate(rows)],
        "tables": [_table("variants", rows, columns)],
        "charts": [chart],
        "report": [p.model_dump(mode="json") for p in ps],
    }


_VIEWS = {
    "step": step_view,
    "variants": variants_view,
    "served": served_view,
    "curve": curve_view,
    "plan": plan_view,
    "recommend": recommend_view,
}


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def _number(key: str, label: str, unit: str, value) -> dict:
    return {"key": key, "label": label, "unit": unit, "value": value}


def _table(name: str, rows: list[dict], columns) -> dict:
    """A table: its columns (key, label, unit) and its rows (only those columns)."""
    cols = [{"key": k, "label": label, "unit": unit} for k, label, unit in columns]
    return {"name": name, "columns": cols, "rows": [{k: r.get(k) for k, _, _ in columns} for r in rows]}


def _load_words(p) -> str:
    load = f"{p.concurrency} clients" if p.concurrency else f"{p.request_rate:g} requests/s"
    return f"{load}, requests of {p.input_len:g} + {p.output_len:g} tokens"
