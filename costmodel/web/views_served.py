"""The page's views of a served model: one run (aggregated, with its timeline, or disaggregated), and a load curve."""

from __future__ import annotations

from costmodel.render import interactive as charts
from costmodel.web.requests import ViewRequest
from costmodel.web.view_parts import (
    SERVED_COLUMNS,
    energy_summary,
    engine_kw,
    load_words,
    loads_of,
    number,
    requests_of,
    served_row,
    served_run,
    served_summary,
    table,
)


def served_view(req: ViewRequest, m, hws) -> dict:
    """One served run: its numbers and its timeline (disaggregated where prefill workers are given)."""
    hw = hws[0]
    if req.prefill_workers:
        return disagg_view(req, m, hw)
    p = served_run(req, m, hw, timeline=True, **loads_of(req)[0])
    return {
        "title": f"{m.name} on {hw.name} x{p.tp * p.attention_dp * p.pipeline_parallel * p.replicas}, "
        f"{p.engine.name}: {load_words(p)}",
        "summary": served_summary(p),
        "tables": [table("served", [served_row(p)], SERVED_COLUMNS)],
        "charts": [charts.timeline_chart(p.timeline)] if p.timeline else [],
        "report": p.model_dump(mode="json"),
    }


def disagg_view(req: ViewRequest, m, hw) -> dict:
    """A disaggregated deployment: prefill and decode pools, the KV cache crossing between them."""
    from costmodel.deploy.disagg import serve_disaggregated
    from costmodel.deploy.pools import Pool

    p = serve_disaggregated(
        m,
        hw,
        requests_of(req, **loads_of(req)[0]),
        prefill=Pool(tp=req.prefill_tp or 1, workers=req.prefill_workers),
        decode=Pool(tp=req.decode_tp or 1, workers=req.decode_workers or 1),
        **engine_kw(req),
    )
    split = p.ttft_split.model_dump()
    bars = {
        "type": "bar",
        "x": [k.removesuffix("_s").replace("_", " ") for k in split],
        "y": [v * 1e3 for v in split.values()],
        "name": "TTFT",
        "hovertemplate": "%{x}: %{y:.4g} ms<extra></extra>",
    }
    return {
        "title": f"{m.name} on {hw.name}, {p.engine}, disaggregated: {p.prefill.workers} prefill x TP"
        f"{p.prefill.tp}, {p.decode.workers} decode x TP{p.decode.tp}",
        "summary": [
            number("ttft_ms", "TTFT mean", "ms", p.ttft_s * 1e3),
            number("tpot_ms", "TPOT mean", "ms", p.tpot_s * 1e3),
            number("tok_s_gpu", "throughput", "tok/s/GPU", p.output_tokens_per_s_per_device),
            number("tok_s_user", "speed", "tok/s/user", p.output_tokens_per_s_per_user),
            *energy_summary(p),
        ],
        "tables": [
            table("ttft", [{k: v * 1e3 for k, v in split.items()}], [(k, k.removesuffix("_s"), "ms") for k in split])
        ],
        "charts": [charts.figure("ttft-split", "where the mean TTFT goes", [bars], "part", "ms")],
        "report": p.model_dump(mode="json"),
    }


def curve_view(req: ViewRequest, m, hws) -> dict:
    """The load curve: one served run per load, in order."""
    from costmodel.core.progress import bar

    hw, loads, points = hws[0], loads_of(req), []
    with bar(len(loads), "loads") as advance:
        for load in loads:
            points.append(served_run(req, m, hw, **load))
            advance()
    dumped = [p.model_dump(mode="json") for p in points]
    top = max(points, key=lambda p: p.output_tokens_per_s_per_gpu)
    return {
        "title": f"{m.name} on {hw.name}, {points[0].engine.name}: load curve of {len(points)} points",
        "summary": [
            number("peak_tok_s_gpu", "most throughput", "tok/s/GPU", top.output_tokens_per_s_per_gpu),
            number("peak_at", "at load", "clients or req/s", top.concurrency or top.request_rate),
            number("tpot_ms_first", "TPOT at the lightest load", "ms", points[0].tpot_s * 1e3),
        ],
        "tables": [table("curve", [served_row(p) for p in points], SERVED_COLUMNS)],
        "charts": charts.curve_charts(dumped, f"{hw.id} tp{req.tp} {req.engine}"),
        "report": dumped,
    }
