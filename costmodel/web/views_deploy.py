"""The page's views of a deployment: every layout on N devices (a plan), and the fewest GPUs for a load."""

from __future__ import annotations

from costmodel.render import interactive as charts
from costmodel.render.recommend import HEADLINE
from costmodel.web.requests import ViewRequest
from costmodel.web.view_parts import engine_flags, loads_of, number, requests_of, seconds, table


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
        ttft_s=seconds(req.ttft_ms),
        tpot_s=seconds(req.tpot_ms),
        max_concurrency=req.max_concurrency,
        flags=engine_flags(req),
        requests=requests_of(req),
        frontend=req.frontend,
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
        ("open", "served alone", ""),
    )
    rows = [
        p | {"ttft_ms": p["ttft_s"] * 1e3, "tpot_ms": p["tpot_s"] * 1e3, "open": point_query(req, p)}
        for p in d["front"]
    ]
    return {
        "title": f"{m.name} on {req.gpus} GPUs of {', '.join(h.id for h in hws)}: every layout under load",
        "summary": [
            number(
                "best_tok_s_gpu",
                f"best ({best.device} {best.layout})",
                "tok/s/GPU",
                best.output_tokens_per_s_per_device,
            ),
            number("best_tok_s_user", "its speed", "tok/s/user", best.output_tokens_per_s_per_user),
            number("points", "points priced", "", len(result.points)),
        ],
        "tables": [table("front", rows, columns)],
        "charts": [charts.plan_chart(d)],
        "report": d,
    }


def capacity_view(req: ViewRequest, m, hws) -> dict:
    """The most clients (or the highest rate) each device serves under the targets, per attention layout."""
    from costmodel.deploy.capacity import load_capacity

    report = load_capacity(
        m,
        hws,
        requests_of(req),
        engine_name=req.engine,
        tpot_s=seconds(req.tpot_ms),
        ttft_s=seconds(req.ttft_ms),
        statistic=req.statistic,
        evaluator=req.evaluator,
        price_per_hour=req.price_per_hour,
        variants=req.variants,
        flags=engine_flags(req),
        weight_dtype=req.weight_dtype,
        kv_dtype=req.kv_dtype,
        load=req.load,
        frontend=req.frontend,
    )
    unit = "clients" if req.load == "concurrency" else "req/s"
    rows = [
        {
            "device": p.device,
            "attention": p.attention,
            "most": p.concurrency if req.load == "concurrency" else p.request_rate,
            "binds": p.binds,
            "ttft_ms": p.at.ttft_s * 1e3 if p.at else None,
            "tpot_ms": p.at.tpot_s * 1e3 if p.at else None,
            "tok_s_gpu": p.at.output_tokens_per_s_per_device if p.at else None,
            "usd_m": p.cost_per_million_tokens,
        }
        for p in report.points
    ]
    columns = (
        ("device", "device", ""),
        ("attention", "attention", ""),
        ("most", "most", unit),
        ("binds", "what binds", ""),
        ("ttft_ms", "TTFT there", "ms"),
        ("tpot_ms", "TPOT there", "ms"),
        ("tok_s_gpu", "throughput there", "tok/s/GPU"),
        ("usd_m", "cost", "$/M tokens"),
    )
    bars = [
        {
            "type": "bar",
            "name": device,
            "x": [r["attention"] for r in rows if r["device"] == device],
            "y": [r["most"] for r in rows if r["device"] == device],
            "hovertemplate": "%{x}: %{y:.4g} " + unit + "<extra>" + device + "</extra>",
        }
        for device in dict.fromkeys(r["device"] for r in rows)
    ]
    first = report.points[0]
    return {
        "title": f"{m.name}: the most {unit} under the targets, {req.engine}",
        "summary": [
            number("most", f"most {unit} ({first.device}, {first.attention})", unit, rows[0]["most"]),
            number("tok_s_gpu", "throughput there", "tok/s/GPU", rows[0]["tok_s_gpu"]),
        ],
        "tables": [table("capacity", rows, columns)],
        "charts": [
            charts.figure("capacity", f"the most {unit} under the targets", bars, "attention", unit, barmode="group")
        ],
        "report": report.model_dump(mode="json"),
    }


def point_query(req: ViewRequest, point: dict) -> str | None:
    """The page's query of a plan's point served alone (its device, layout and clients), or None for a pasted
    model (whose config.json would make the link as long as the file)."""
    if req.config is not None:
        return None
    fields = req.model_dump(by_alias=True) | {"view": "served", "gpu": [point["device"]]}
    if point["mode"] == "disagg":
        pools = {
            k: point[k.replace("-", "_")] for k in ("prefill-tp", "prefill-workers", "decode-tp", "decode-workers")
        }
        fields |= pools | {"request-rate": None, "concurrency": [point["concurrency"]]}
    else:
        fields |= {k.replace("_", "-"): point[k] for k in ("tp", "replicas", "attention_dp")}
        fields |= {"expert-parallel": point["expert_parallel"], "pipeline-parallel-size": point["pipeline_parallel"]}
        fields |= {"request-rate": None, "concurrency": [point["concurrency"] // point["replicas"] * point["replicas"]]}
    return ViewRequest.model_validate(fields).query()


def recommend_view(req: ViewRequest, m, hws) -> dict:
    """The fewest GPUs that serve the load under the targets, and every candidate searched."""
    from costmodel.deploy.recommend import recommend

    rec = recommend(
        m,
        hws,
        requests_of(req, **loads_of(req)[0]),
        engine_name=req.engine,
        flags=engine_flags(req),
        ttft_s=seconds(req.ttft_ms),
        tpot_s=seconds(req.tpot_ms),
        statistic=req.statistic,
        evaluator=req.evaluator,
        price_per_gpu_hour=req.price_per_hour,
        minimise=req.minimise,
        max_gpus=req.max_gpus,
        weight_dtype=req.weight_dtype,
        kv_dtype=req.kv_dtype,
        frontend=req.frontend,
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
        ("cost_per_hour", "cost per hour", "$"),
        ("energy_j_per_output_token", "energy per output token", "J"),
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
        "title": f"{m.name}: the {HEADLINE[rec.minimise]} of {', '.join(h.id for h in hws)} for the load",
        "summary": [
            number("gpus", f"GPUs ({rec.gpu} {rec.layout})", "", rec.gpus),
            number("ttft_ms", "TTFT mean there", "ms", rec.at.ttft_s * 1e3),
            number("tpot_ms", "TPOT mean there", "ms", rec.at.tpot_s * 1e3),
            number("energy_j", "energy per output token there", "J", rec.at.energy_j_per_output_token),
        ],
        "tables": [table("candidates", rows, columns)],
        "charts": [charts.figure("candidates", "GPUs each candidate needs", [bars], "candidate", "GPUs")],
        "report": rec.model_dump(mode="json"),
    }
