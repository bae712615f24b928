"""costmodel plan's answer as text: per device kind, the front of its priced layouts, the best under the targets,
and the layouts it left out."""

from __future__ import annotations

from costmodel.render.serving import ms
from costmodel.render.text import aligned


def plan_table(plan) -> str:
    """Per device kind: the front's points with their layouts, the best under the targets, what was skipped."""
    targets = ", ".join(
        t
        for t in (
            f"TTFT <= {ms(plan.ttft_target_s)}" if plan.ttft_target_s else "",
            f"TPOT <= {ms(plan.tpot_target_s)}" if plan.tpot_target_s else "",
        )
        if t
    )
    lines = [
        f"{plan.model_name} [{plan.model}] on {plan.devices} devices, served by {plan.engine}: requests of "
        f"{plan.input_len:,} + {plan.output_len:,} tokens" + (f", targets {targets} (means)" if targets else ""),
        *([plan.stopped[:1].upper() + plan.stopped[1:]] if plan.stopped else []),
    ]
    for device in dict.fromkeys(p.device for p in plan.points):
        front = [q for q in plan.front if q.device == device]
        joules = any(q.output_tokens_per_j is not None for q in front)
        rows = [
            ("layout", "clients", "TTFT", "TPOT", "tok/s/device", "tok/s/user")
            + (("tok/J",) if joules else ())
            + (("meets",) if targets else ())
        ]
        for p in front:
            rows.append(
                (
                    p.layout,
                    str(p.concurrency),
                    ms(p.ttft_s),
                    ms(p.tpot_s),
                    f"{p.output_tokens_per_s_per_device:,.0f}",
                    f"{p.output_tokens_per_s_per_user:.1f}",
                )
                + ((f"{p.output_tokens_per_j:.3g}" if p.output_tokens_per_j is not None else "",) if joules else ())
                + (("yes" if p.meets_targets else "no",) if targets else ())
            )
        lines += [
            "",
            f"{device}: the front (no point better on both tokens/s per device and per user)",
            *aligned(rows, right=set(range(1, 6 + joules))),
        ]
        best = [p for p in plan.best if p.device == device]
        if best:
            b = best[0]
            lines.append(
                f"best under the targets{_unconstrained(plan)}: {b.layout} at {b.concurrency} clients, "
                f"{b.output_tokens_per_s_per_device:,.0f} tok/s/device, {b.output_tokens_per_s_per_user:.1f} "
                f"tok/s/user (TTFT {ms(b.ttft_s)}, TPOT {ms(b.tpot_s)})"
                + (f", {b.output_tokens_per_j:.3g} tok/J at {b.power_w:.0f} W per device" if b.power_w else "")
            )
        elif targets:
            lines.append("best under the targets: none of the points meets them")
        skipped = [s for s in plan.skipped if s.device == device]
        if skipped:
            reasons: dict[str, int] = {}
            for s in skipped:
                reasons[s.reason] = reasons.get(s.reason, 0) + 1
            lines.append(
                f"{len(skipped)} layouts left out: "
                + "; ".join(f"{r} ({n} layout{'s' if n > 1 else ''})" for r, n in reasons.items())
            )
    lines += [
        "",
        "Columns:",
        "  - layout: devices and how the model is split over them; clients: the closed "
        "loop's clients at that point; TTFT, TPOT: means; tok/s/device: output tokens a second per device; "
        "tok/s/user: a request's output tokens over its whole time"
        + (
            "; tok/J: output tokens per joule, every device's energy over the run (docs/energy.md)"
            if any(p.output_tokens_per_j is not None for p in plan.front)
            else ""
        )
        + ("; meets: whether the point's means meet the targets" if targets else ""),
        "",
        "Assumptions:",
        *[f"  - {a}" for a in plan.assumptions],
    ]
    return "\n".join(lines)


def _unconstrained(plan) -> str:
    """The targets a plan was not given, named as unconstrained (its best may then take any TTFT or TPOT)."""
    free = [name for name, target in (("TTFT", plan.ttft_target_s), ("TPOT", plan.tpot_target_s)) if not target]
    return f" ({' and '.join(free)} unconstrained: no target given)" if free else ""
