"""Text and LaTeX renderings of the symbolic counts, attention predictions and sweeps, and the formatting helpers
the other renderers share; they format typed reports and import no producer."""

from __future__ import annotations

import textwrap

from costmodel.core.vocab import VARIANT_NAMES, variant_label


def _title(report) -> str:
    name = VARIANT_NAMES[report.variant]
    if report.variant == "gqa":
        name += f" (g = {report.kv_heads})" if report.kv_heads.is_Integer else " (g key/value heads)"
    form = f" ({report.form} form)" if report.form else ""
    subs = ", ".join(f"{k} = {v}" for k, v in report.substitutions.items())
    return f"{name} attention{form}, {report.mode} mode, {report.dtype}" + (f"; {subs}" if subs else "")


def table(report, asym=None) -> str:
    """Aligned per-op table with totals, assumptions and (optionally) the asymptotic block."""
    import sympy

    rows = [("op", "einsum", "FLOPs", "memory (elements)")]
    rows += [(op.name, op.einsum or f"({op.kind})", str(op.flops), str(op.memory_elements)) for op in report.ops]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [_title(report), ""]
    for i, row in enumerate(rows):
        if i == 1:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 17)
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[3])
    lines += [
        "",
        f"total FLOPs  = {report.flops}",
        f"total memory = {report.memory_elements} elements",
        f"bytes = {sympy.factor(report.bytes / report.memory_elements)} x memory elements ({report.dtype})",
        f"memory/arithmetic = {sympy.factor(report.ratio)}",
        "",
        "Conventions:",
        *(f"  - {a}" for a in report.assumptions),
    ]
    if asym is not None:
        lines += ["", *asymptotic_lines(asym)]
    return "\n".join(lines)


def asymptotic_lines(asym) -> list[str]:
    lines = [
        *textwrap.wrap("Asymptotic forms, under: " + "; ".join(asym.assumptions), 100, subsequent_indent="  "),
        f"  arithmetic         Θ({asym.flops})",
        f"  memory             Θ({asym.memory})",
        f"  memory/arithmetic  Θ({asym.ratio})",
    ]
    claim = asym.claim
    if claim is None:
        return lines
    stated = f"{claim.kind}({claim.ratio})"
    if claim.ratio != claim.ratio_in_d:
        stated += f" = {claim.kind}({claim.ratio_in_d})"
    lines.append(f"  paper              {stated}  [{claim.source}]")
    if asym.claim_holds:
        how = "the derived form" + (" is within this bound" if claim.kind == "O" else " matches")
        lines.append(f"                     holds: {how}")
    elif asym.extra_assumptions:
        lines += textwrap.wrap(
            "holds only with an extra assumption: " + asym.extra_assumptions[0],
            100,
            initial_indent=" " * 21,
            subsequent_indent=" " * 23,
        )
        lines.append(f"                     under it: Θ({asym.ratio_with_extra})")
    else:
        lines.append("                     does not follow from these assumptions")
    return lines


def latex(report, asym=None) -> str:
    """A LaTeX tabular of the per-op counts, for papers."""
    import sympy

    out = [
        f"% costmodel derive: {_title(report)}",
        r"\begin{tabular}{llll}",
        r"\hline",
        r"op & einsum & FLOPs & memory (elements) \\",
        r"\hline",
    ]
    for op in report.ops:
        eq = rf"\texttt{{{op.einsum}}}" if op.einsum else op.kind
        name = op.name.replace("_", r"\_")
        out.append(rf"{name} & {eq} & ${sympy.latex(op.flops)}$ & ${sympy.latex(op.memory_elements)}$ \\")
    out += [
        r"\hline",
        rf"total & & ${sympy.latex(report.flops)}$ & ${sympy.latex(report.memory_elements)}$ \\",
        r"\hline",
        r"\end{tabular}",
    ]
    if asym is not None:
        out.append(rf"% memory/arithmetic = \Theta\left({sympy.latex(asym.ratio)}\right)")
        out.append(rf"$\Theta\left({sympy.latex(asym.ratio)}\right)$")
    return "\n".join(out)


# --- predictions ---------------------------------------------------------------------------------------


def aligned(rows: list[tuple[str, ...]], right=(), indent: str = "", rules=()) -> list[str]:
    """Rows as aligned columns: columns in ``right`` right-justified, the rest left; a rule of dashes
    before each row index in ``rules`` (negative indices count from the end)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    before = {i % len(rows) for i in rules}
    out = []
    for i, row in enumerate(rows):
        if i in before:
            out.append(indent + "  ".join("-" * w for w in widths))
        cells = (c.rjust(w) if j in right else c.ljust(w) for j, (c, w) in enumerate(zip(row, widths)))
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def _figures(x: float, digits: int) -> str:
    """``x`` (not negative, below 10**digits once rounded) to ``digits`` significant figures, never in exponent
    notation."""
    text = f"{x:.{digits}g}"
    return text if "e" not in text else f"{float(text):.0f}"


#: Units of time as people read them: (seconds in one, name), smallest first; past an hour, hours.
TIME_UNITS = ((1e-9, "ns"), (1e-6, "µs"), (1e-3, "ms"), (1.0, "s"), (60.0, "min"), (3600.0, "h"))


def _time_unit(x: float, digits: int) -> tuple[float, str, float]:
    """(seconds in the unit ``x`` seconds print in, its name, ``x`` as printed): the largest unit whose value is
    at least one (``min`` from 60 s, ``h`` from 3600 s); where rounding to ``digits`` figures reaches the next unit
    (999.7 µs, 59.96 s), the rounded value in that unit (1 ms, 1 min)."""
    scale, name = TIME_UNITS[0]
    for unit_scale, unit_name in TIME_UNITS:
        if abs(x) >= unit_scale:
            scale, name = unit_scale, unit_name
    rounded = float(f"{x / scale:.{digits}g}") * scale
    nxt = next((u for u in TIME_UNITS if u[0] > scale), None)
    if nxt is not None and abs(rounded) >= nxt[0]:
        return nxt[0], nxt[1], rounded
    return scale, name, x


def duration(x: float, digits: int = 3) -> str:
    """Seconds as people read them: ``2.4e-5`` -> ``"24 µs"``, ``1330`` -> ``"22.2 min"``, ``90000`` ->
    ``"25 h"``; never ``ks`` and never an exponent (hours past 10**digits print whole, with separators)."""
    if x == 0:
        return "0 s"
    if x < 0:
        return "-" + duration(-x, digits)
    scale, name, shown = _time_unit(x, digits)
    value = shown / scale
    return f"{value:,.0f} {name}" if value >= 10**digits else f"{_figures(value, digits)} {name}"


def count(n: float) -> str:
    """A whole number with thousands separators: ``459056`` -> ``"459,056"``."""
    return f"{round(n):,}"


#: SI prefixes, largest first: (scale, prefix).
PREFIXES = (
    (1e15, "P"),
    (1e12, "T"),
    (1e9, "G"),
    (1e6, "M"),
    (1e3, "k"),
    (1, ""),
    (1e-3, "m"),
    (1e-6, "µ"),
    (1e-9, "n"),
)


def si(x: float, unit: str = "", digits: int = 3) -> str:
    """``1.23e9, "B"`` -> ``"1.23 GB"``; a time (``unit`` ``"s"``) is :func:`duration`'s."""
    if unit == "s":
        return duration(x, digits)
    if x == 0:
        return f"0 {unit}".rstrip()
    if x < 0:
        return "-" + si(-x, unit, digits)
    for i, (scale, p) in enumerate(PREFIXES):
        if x >= scale:
            if i and float(f"{x / scale:.{digits}g}") >= 1000:  # rounds up to the next prefix: 999.7 k is 1 M
                scale, p = PREFIXES[i - 1]
            value = x / scale
            return f"{_figures(value, digits) if value < 10**digits else f'{value:,.0f}'} {p}{unit}".rstrip()
    return f"{x:.{digits}g} {unit}".rstrip()


def si_range(low: float, high: float, unit: str = "") -> str:
    """``2.46e-5, 3.28e-5, "s"`` -> ``"24.6-32.8 µs"``: both ends in the unit of the upper one."""
    top = si(high, unit, 2 if high < 1e-9 else 3)
    if high <= 0 or not top[0].isdigit():
        return f"{si(low, unit)}-{top}"
    value, suffix = top.split(" ", 1) if " " in top else (top, "")
    if unit == "s":
        scale = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}[suffix]
    else:
        scale = next((sc for sc, p in PREFIXES if suffix == p + unit), 1.0)
    return f"{_figures(low / scale, 3)}-{value} {suffix}".rstrip()


def band_cell(b) -> str:
    """A band as a table cell (empty where none applies)."""
    return si_range(b.low_s, b.high_s, "s") if b is not None else ""


MODE_TEXT = {
    "incremental": "one decode step after {m} cached positions",
    "generate": "{n} decode steps from an empty cache",
    "batched": "batched attention, {n} queries over {m} positions",
}


def workload_line(w) -> str:
    heads = f"h={w.h}" + ("" if w.variant == "mha" else "")
    kv = f"k={w.k}, v={w.v}" if w.k != w.v else f"k=v={w.k}"
    layers = f"{w.layers} layer" + ("s" if w.layers > 1 else "")
    return (
        f"{MODE_TEXT[w.mode].format(m=w.m, n=w.n)}: b={w.b}, d={w.d}, {heads}, {kv}, {w.dtype}, {layers}, {w.execution}"
    )


def hardware_line(hw: dict) -> str:
    tag = " (measured)" if hw.measured else ""
    return (
        f"{hw.name} [{hw.id}]{tag}: {hw.dtype} peak {si(hw.peak_flops_per_s, 'FLOP/s')}, "
        f"memory {si(hw.memory_bandwidth_bytes_per_s, 'B/s')}, datasheet ridge {hw.ridge_point_flops_per_byte:.0f} "
        f"FLOP/B, capacity {si(hw.memory_capacity_bytes, 'B')}, "
        + (hw.efficiency if hw.efficiency else f"launch {hw.launch_overhead_s * 1e6:g} µs")
    )


def workload_label(w) -> str:
    return variant_label(w.variant, w.g)


def bound_cell(bound: str, intensity: float, ridge: float) -> str:
    """What binds an op at the fitted rates, with ``*`` where the datasheet ridge says the other (an op below the
    ridge that the fitted kernel still runs compute-bound, or above it memory-bound)."""
    other = (bound == "compute" and intensity < ridge) or (bound == "memory" and intensity > ridge)
    return bound + ("*" if other and bound in ("compute", "memory") else "")


def op_table(p) -> list[str]:
    joules = p.total.energy_j is not None
    head = ("op", "einsum", "FLOPs", "bytes", "FLOP/B", "compute", "memory", "overhead", "time", "range")
    rows = [head + (("energy",) if joules else ()) + ("bound",)]
    ridge = p.hardware.ridge_point_flops_per_byte
    for r in p.ops:
        rows.append(
            (
                r.name,
                r.einsum or "",
                si(r.flops),
                si(r.bytes, "B"),
                f"{r.intensity:.3g}",
                si(r.compute_s, "s"),
                si(r.memory_s, "s"),
                si(r.launch_s, "s"),
                si(r.time_s, "s"),
                band_cell(r.band),
            )
            + ((si(r.energy_j, "J"),) if joules else ())
            + (bound_cell(r.bound, r.intensity, ridge),)
        )
    t = p.total
    per_layer = " per layer" if p.workload.layers > 1 else ""
    rows.append(
        (
            f"total{per_layer and ' x' + str(p.workload.layers)}",
            "",
            si(t.flops),
            si(t.bytes, "B"),
            f"{t.flops / t.bytes:.3g}",
            si(t.compute_s, "s"),
            si(t.memory_s, "s"),
            si(t.launch_s, "s"),
            si(t.time_s, "s"),
            band_cell(t.band),
        )
        + ((f"{si(t.energy_j, 'J')} at {t.power_w:.0f} W",) if joules else ())
        + (bound_cell(t.bound, t.flops / t.bytes, ridge),)
    )
    return aligned(rows, right={2, 3, 4, 5, 6, 7, 8, 9, 10}, rules=(1, -1))


def op_legend(ridge: float) -> list[str]:
    """What an op table's columns mean."""
    return [
        "  - FLOP/B: FLOPs per byte moved; compute, memory: the op's FLOPs and bytes each alone at this "
        "device's fitted rates for its kernel; overhead: fixed costs per call (launch, second kernels); time: "
        "the op as priced (the first assumption); range: where its measured time is expected to fall (the "
        "assumption that begins 'range')",
        f"  - bound: the longer of compute and memory at the fitted rates; * where the datasheet ridge "
        f"({ridge:.0f} FLOP/B) says the other: at this shape the kernel reaches a small share of its peak "
        "(compute*) or of its bandwidth (memory*)",
        "  - energy: the device's joules over the op (its running power over the time, its FLOPs and bytes at "
        "their sourced energies: docs/energy.md); the total's at its mean power",
    ]


def summary_legend(p) -> list[str]:
    """What the side-by-side summary's columns mean, for ``p``'s workload."""
    w, ctx = p.workload, p.memory.context_dim
    per = (
        "time: the whole batched call"
        if w.mode == "batched"
        else f"time/token: the time for each of the b={w.b} sequences to gain one token (one decode step)"
    )
    return [
        f"  - {per}; tokens/s: tokens the batch gains a second through this one attention layer alone, "
        "not a whole model's rate",
        "  - KV cache, weights: this layer's bytes (the weights of its projections); fits: both fit in the "
        f"device's memory; max batch: the largest batch that fits at this context; max {ctx}: the longest "
        f"{'context (cached positions)' if ctx == 'm' else 'sequence'} that fits at this batch",
    ]


def prediction_table(preds: list) -> str:
    """Per-op tables for each prediction, then a side-by-side summary with speed-ups over the first."""
    first = preds[0]
    lines = [hardware_line(first.hardware), "workload: " + workload_line(first.workload), ""]
    for p in preds:
        lines += [workload_label(p.workload), *op_table(p), ""]
    base = first.total.time_s
    per = "time/token" if first.workload.mode != "batched" else "time"
    head = (
        "variant",
        per,
        "range",
        "speed-up",
        "tokens/s",
        "KV cache",
        "weights",
        "fits",
        "max batch",
        f"max {first.memory.context_dim}",
    )
    rows = [head]
    for p in preds:
        t, mem = p.total, p.memory
        scale = (t.per_token_s or t.time_s) / t.time_s
        span = band_cell(t.band and t.band.scaled(scale))
        rows.append(
            (
                workload_label(p.workload),
                si(t.per_token_s or t.time_s, "s"),
                span,
                f"{base / t.time_s:.2f}x",
                si(t.tokens_per_s),
                si(mem.kv_cache_bytes, "B"),
                si(mem.weight_bytes, "B"),
                "yes" if mem.fits else "NO",
                count(mem.max_batch),
                count(mem.max_context),
            )
        )
    lines += aligned(rows, right=range(1, len(head)))
    lines += ["", "Columns:", *op_legend(first.hardware.ridge_point_flops_per_byte), *summary_legend(first)]
    lines += ["", "Assumptions:", *(f"  - {a}" for a in first.assumptions)]
    if len(preds) > 1:
        lines.append(
            f"  - speed-up: time of {workload_label(first.workload)} / time of each variant, same device and workload"
        )
    return "\n".join(lines)


def sweep_table(sw) -> str:
    """Time per step (or call) of each variant at each swept value; ``*`` where memory does not fit."""
    hw, name, values = sw.hardware, sw.parameter, sw.values
    lines = [
        f"{hw.name} [{hw.id}], sweep of {name} ({sw.dim}); time per step or call"
        + (f" ({hw.efficiency})" if hw.efficiency else " (datasheet roofline)")
        + "; * = does not fit in memory"
    ]
    labels = [workload_label(w) if name != "groups" else w.variant.upper() for w in sw.workloads]
    rows = [(name, *labels)]
    for i, x in enumerate(values):
        cells = [si(r["time_s"], "s") + ("" if r["fits"] else " *") for r in sw.records[i :: len(values)]]
        rows.append((str(x), *cells))
    lines += aligned(rows, right=range(len(rows[0])))
    return "\n".join(lines)


def capacity_text(nbytes: float) -> str:
    """A memory capacity as its vendor states it: binary (GiB) when it is a whole number of GiB and not of
    GB (TPU v2 to v5p), decimal otherwise."""
    gib = nbytes / 2**30
    if nbytes % 2**30 == 0 and nbytes % 10**9:
        return f"{gib:.3g} GiB"
    return si(nbytes, "B")
