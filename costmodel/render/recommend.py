"""costmodel recommend's answer as text: the answer, its latencies, its commands and the front it chose from."""

from __future__ import annotations

from costmodel.render.text import aligned, si

#: The answer's headline by what it minimises.
HEADLINE = {"gpus": "fewest GPUs", "cost": "least cost", "energy": "least energy"}


def _energy(at) -> str:
    """The answer's joules per output token and power per GPU, where its devices state a board power."""
    if at.energy_j_per_output_token is None:
        return ""
    return f"; {si(at.energy_j_per_output_token, 'J')} per output token at {at.power_w:.0f} W per GPU"


def recommendation_table(rec) -> str:
    """A recommendation: the answer, its latencies at the load, the commands, and the front it chose from (the best
    token budget of each layout that serves the load, then how many could not and why)."""
    load = f"{rec.concurrency} clients" if rec.concurrency is not None else f"{rec.request_rate:g} requests/s"
    targets = ", ".join(
        f"{name} {rec.statistic} <= {value * 1e3:g} ms"
        for name, value in (("TTFT", rec.ttft_target_s), ("TPOT", rec.tpot_target_s))
        if value is not None
    )
    at = rec.at
    cost = f", ${rec.cost_per_hour:,.2f} per hour" if rec.cost_per_hour is not None else ""
    shape = f"{rec.replicas} replica(s) of {rec.layout}" if rec.mode == "agg" else rec.layout
    budget = f", token budget {rec.max_num_batched_tokens}" if rec.max_num_batched_tokens else ""
    each = " (each replica)" if rec.mode == "agg" else ""
    lines = [
        f"{rec.model_name} [{rec.model}] served by {rec.engine}: {load} of {rec.input_len:,} + {rec.output_len:,} tokens, {targets}",
        *([f"{rec.stopped.upper()[:1]}{rec.stopped[1:]}"] if rec.stopped else []),
        "",
        f"{HEADLINE[rec.minimise]}: {rec.gpus} x {rec.gpu} ({shape}{budget}){cost}",
        f"at that load: TTFT {si(at.ttft_s, 's')} (p90 {si(at.ttft.p90, 's')}), TPOT {si(at.tpot_s, 's')} "
        f"(p90 {si(at.tpot.p90, 's')}), {at.output_tokens_per_s_per_device:,.0f} tokens/s per GPU "
        f"({rec.evaluator})" + _energy(at),
        "",
        *(["reprice: costmodel " + " ".join(rec.command)] if rec.command else []),
        f"launch{each}: {rec.launch}",
        f"measure{each if rec.mode == 'agg' else ' (through the router)'}: {rec.bench}",
        "",
    ]
    served = {}
    for c in rec.candidates:
        if c.gpus is not None:
            key = (c.gpu, c.mode, c.layout)
            if key not in served or (c.gpus, -(c.per_unit or 0)) < (served[key].gpus, -(served[key].per_unit or 0)):
                served[key] = c
    unit = "req/s" if rec.request_rate is not None else "clients"
    joules = any(c.energy_j_per_output_token is not None for c in served.values())
    dollars = any(c.cost_per_hour is not None for c in served.values())
    rows = [
        ("device", "layout", "token budget", f"serves ({unit})", "binds", "GPUs")
        + (("$/hour",) if dollars else ())
        + (("J/token",) if joules else ())
    ]
    for c in sorted(served.values(), key=lambda c: (c.objective(rec.minimise), c.gpus, c.gpu, c.unit_gpus)):
        shape = (
            f"{c.replicas} x ({c.layout})"
            if c.mode == "agg"
            else f"{c.prefill_workers} x {c.prefill_tp}-GPU prefill + {c.decode_workers} x {c.decode_tp}-GPU decode"
        )
        rows.append(
            (
                c.gpu,
                shape,
                str(c.max_num_batched_tokens or "default"),
                f"{c.per_unit * (c.replicas or 1):.3g}",
                c.binds or "",
                str(c.gpus),
            )
            + ((f"{c.cost_per_hour:,.2f}" if c.cost_per_hour is not None else "",) if dollars else ())
            + (
                (si(c.energy_j_per_output_token, "J") if c.energy_j_per_output_token is not None else "",)
                if joules
                else ()
            )
        )
    lines += aligned(rows, right={3, 5, 6, 7}, rules=(1,))
    shut = {(c.gpu, c.mode, c.layout): c.binds for c in rec.candidates if c.gpus is None}
    shut = {k: v for k, v in shut.items() if k not in served}
    if shut:
        reasons = sorted({(v or "").split(":")[0][:60] for v in shut.values()})
        lines.append(f"{len(shut)} more layout(s) cannot serve it: {'; '.join(reasons)}")
    lines += ["", "Assumptions:", *(f"  - {a}" for a in rec.assumptions)]
    return "\n".join(lines)
