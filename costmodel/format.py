"""Text and LaTeX renderings of symbolic reports (the CLI only prints these)."""

from __future__ import annotations

import textwrap

import sympy

from costmodel.asymptotic import Asymptotics
from costmodel.counts import CostReport

VARIANT_NAMES = {"mha": "multi-head (g = h)", "mqa": "multi-query (g = 1)", "gqa": "grouped-query"}


def _title(report: CostReport) -> str:
    name = VARIANT_NAMES[report.variant]
    if report.variant == "gqa":
        name += f" (g = {report.kv_heads})" if report.kv_heads.is_Integer else " (g key/value heads)"
    subs = ", ".join(f"{k} = {v}" for k, v in report.substitutions.items())
    return f"{name} attention, {report.mode} mode, {report.dtype}" + (f"; {subs}" if subs else "")


def table(report: CostReport, asym: Asymptotics | None = None) -> str:
    """Aligned per-op table with totals, assumptions and (optionally) the asymptotic block."""
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


def asymptotic_lines(asym: Asymptotics) -> list[str]:
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
            "holds only with an extra assumption: " + asym.extra_assumptions[0], 100,
            initial_indent=" " * 21, subsequent_indent=" " * 23,
        )
        lines.append(f"                     under it: Θ({asym.ratio_with_extra})")
    else:
        lines.append("                     does not follow from these assumptions")
    return lines


def latex(report: CostReport, asym: Asymptotics | None = None) -> str:
    """A LaTeX tabular of the per-op counts, for papers."""
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
