"""The page's views of one attention layer and of a model's step: MHA, GQA and MQA side by side (or one), their
exact counts and Θ forms, a model's decode step and prefill op by op, and the model beside its other attentions."""

from __future__ import annotations

from costmodel.render import interactive as charts
from costmodel.web.requests import ViewRequest
from costmodel.web.view_parts import OP_COLUMNS, context_of, number, op_row, table


def attention_view(req: ViewRequest, m, hws) -> dict:
    """One attention layer (no model): MHA, GQA and MQA side by side, or the one asked for, op by op."""
    from costmodel.attention.roofline import compare
    from costmodel.attention.workload import workloads

    hw = hws[0]
    ws = workloads(
        req.variant,
        req.groups,
        req.mode,
        batch=req.batch,
        seq=req.seq,
        context=req.context,  # None: by the mode, as on the command line
        d_model=req.d_model,
        heads=req.heads,
        head_dim=req.head_dim,
        dtype=req.dtype,
    )
    d = compare(ws, hw).model_dump(mode="json")
    names = [f"{p['workload']['variant'].upper()} (g={p['workload']['g']})" for p in d]
    ops = {name: [o | {"section": name} for o in p["ops"]] for name, p in zip(names, d)}
    bars = [
        {
            "type": "bar",
            "name": name,
            "x": [o["name"] for o in mine],
            "y": [o["time_s"] * 1e6 for o in mine],
            "hovertemplate": "%{x}: %{y:.4g} µs<extra>" + name + "</extra>",
        }
        for name, mine in ops.items()
    ]
    rows = [{"phase": name, **op_row(o)} for name, mine in ops.items() for o in mine]
    return {
        "title": f"one attention layer on {hw.name}: batch {req.batch}, {d[0]['workload']['m']} cached positions, {req.mode}",
        "summary": [
            number(f"time_us_{i}", f"{n}, the layer", "µs", p["total"]["time_s"] * 1e6)
            for i, (n, p) in enumerate(zip(names, d))
        ],
        "tables": [table("ops", rows, (("phase", "attention", ""), *OP_COLUMNS[2:]))],
        "charts": [
            charts.roofline_chart(d[0]["hardware"], ops),
            charts.figure("ops-attention", "time by op", bars, "op", "time (µs)", barmode="group"),
        ],
        "report": d,
    }


def derive_view(req: ViewRequest, m, hws) -> dict:
    """The exact symbolic counts of one attention program and their Θ forms under the paper's assumptions."""
    from costmodel.counts.asymptotic import analyze
    from costmodel.counts.exact import derive

    report = derive(req.variant or "mha", req.mode, groups=req.groups, dtype=req.dtype)
    theta = analyze(report)
    rows = [
        {"name": o.name, "einsum": o.einsum or "", "flops": str(o.flops), "bytes": str(o.bytes)} for o in report.ops
    ]
    rows.append({"name": "total", "einsum": "", "flops": str(report.flops), "bytes": str(report.bytes)})
    columns = (("name", "op", ""), ("einsum", "einsum", ""), ("flops", "FLOPs", ""), ("bytes", "bytes", ""))
    return {
        "title": f"exact counts of {report.variant.upper()}, {report.mode}, in {report.dtype}",
        "summary": [
            number("ratio", "memory per arithmetic, Θ", "", f"Θ({theta.ratio})"),
            number("flops", "FLOPs, Θ", "", f"Θ({theta.flops})"),
            number("memory", "memory, Θ", "", f"Θ({theta.memory})"),
        ],
        "tables": [table("counts", rows, columns)],
        "charts": [],
        "report": report.model_dump() | {"asymptotic": theta.model_dump()},
    }


def step_view(req: ViewRequest, m, hws) -> dict:
    """A model's decode step and prefill, op by op, on the first device."""
    from costmodel.model.step import predict_model

    hw = hws[0]
    p = predict_model(
        m,
        hw,
        batch=req.batch,
        context=context_of(req),
        tp=req.tp,
        weight_dtype=req.weight_dtype,
        kv_dtype=req.kv_dtype,
        expert_parallel=req.expert_parallel,
        attention_dp=req.attention_dp,
    )
    d = p.model_dump(mode="json")
    ops = {phase: d[phase]["ops"] for phase in ("decode", "prefill")}
    rows = [{"phase": phase, **op_row(o)} for phase, mine in ops.items() for o in mine]
    return {
        "title": f"{m.name} on {hw.name}: one decode step of {req.batch} x {context_of(req)} tokens, and its prefill",
        "summary": [
            number("tpot_ms", "TPOT", "ms", p.total.tpot_s * 1e3),
            number("ttft_ms", "TTFT (prefill)", "ms", p.total.ttft_s * 1e3),
            number("tokens_per_s", "decode tokens/s", "tok/s", p.total.tokens_per_s),
        ],
        "tables": [table("ops", rows, OP_COLUMNS)],
        "charts": [charts.roofline_chart(d["hardware"], ops), *(charts.ops_chart(ph, o) for ph, o in ops.items())],
        "report": d,
    }


def variants_view(req: ViewRequest, m, hws) -> dict:
    """The model and its MHA, GQA, MQA and MLA versions side by side: the same step, each one's cache."""
    from costmodel.model.requests import with_variants
    from costmodel.model.step import predict_model

    hw = hws[0]
    kw = dict(batch=req.batch, context=context_of(req), tp=req.tp, weight_dtype=req.weight_dtype, kv_dtype=req.kv_dtype)
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
            "offsetgroup": axis,  # side by side, each on its own axis
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
        "title": f"{m.name} on {hw.name}: MHA, GQA, MQA and MLA at batch {req.batch} x {context_of(req)} tokens",
        "summary": [number(f"tpot_ms_{i}", f"TPOT, {r['attention']}", "ms", r["tpot_ms"]) for i, r in enumerate(rows)],
        "tables": [table("variants", rows, columns)],
        "charts": [chart],
        "report": [p.model_dump(mode="json") for p in ps],
    }
