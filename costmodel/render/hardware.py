"""Hardware profiles as text: the list, one device's detail, and their records."""

from __future__ import annotations

import textwrap

from costmodel.render.models import with_unit
from costmodel.render.text import aligned, capacity_text, si


def hardware_table(profiles, status: dict[str, str]) -> str:
    """The profiles, with where each one's efficiency parameters come from (``status``: id -> text)."""
    rows = [("id", "name", "bf16/fp16", "fp8", "memory BW", "capacity", "on-chip", "efficiency", "aliases")]
    for p in profiles:
        peak = p.peak_flops_per_s.get("bf16") or p.peak_flops_per_s.get("fp16")
        fp8 = p.peak_flops_per_s.get("fp8")
        rows.append(
            (
                p.id,
                p.name,
                si(peak.value, "FLOP/s") if peak else "-",
                si(fp8.value, "FLOP/s") if fp8 else "-",
                si(p.bandwidth, "B/s"),
                capacity_text(p.capacity),
                si(p.on_chip_memory_bytes.value, "B"),
                status[p.id],
                ", ".join(p.aliases),
            )
        )
    legend = [
        "",
        "Columns:",
        "  - bf16/fp16, fp8: the datasheet's dense peak (- where the device has no such unit); memory BW, capacity: "
        "the datasheet's; on-chip: its last-level cache or SRAM",
        "  - efficiency: where its kernel parameters come from: fitted on published timings (how many parameters), "
        "from another device by the transfer rule, both, or the datasheet roofline alone",
    ]
    return "\n".join([*aligned(rows), *legend])


def hardware_detail(p, reference: str | None = None, attention: tuple[str, str] | None = None) -> str:
    """One profile with the source of every number; ``reference``: the id its efficiency is transferred from,
    ``attention`` the id its attention classes are transferred from where it is another device
    (:data:`costmodel.price.origin.ATTENTION_CLASSES`), and the kind of attention kernel they share."""
    lines = [f"{p.name} [{p.id}]  {p.vendor} {p.kind}" + (f"  aliases: {', '.join(p.aliases)}" if p.aliases else "")]
    if p.measured:
        m = p.measured
        lines.append(f"MEASURED on {m.device}, {m.date}, torch {m.torch_version}: {m.method}")
    for field, item in p.sourced_items():
        value = "x".join(map(str, item.shape)) if hasattr(item, "shape") else with_unit(field, item.value)
        lines.append(f"  {field:36s} {value:>14s}  [{item.source}, {item.confidence}]")
    lines.append(
        f"  ridge point (bf16/fp16 or first dtype): "
        f"{p.ridge_point(next(iter(d for d in ('bf16', 'fp16') if d in p.peak_flops_per_s), next(iter(p.peak_flops_per_s)))):.1f} FLOP/B"
    )
    if p.interconnect_topology == "mesh" and p.domain is not None:
        lines.append(
            f"  interconnect: a point-to-point mesh of {p.domain} devices; a group of n moves its data over n - 1 of "
            f"each device's {p.domain - 1} links"
        )
    if p.architecture is not None:
        k = p.kernels
        tiles = ", ".join(f"{a}x{b}" for a, b in k.gemm_tiles)
        lines.append(
            f"  kernels: GEMM tiles {tiles}; split-K slices >= {k.split_k_min}; decode blocks of "
            f"{k.decode_block} positions; prefill tiles of {k.prefill_block} rows"
        )
        lines += textwrap.wrap(f"[{k.source}]", 100, initial_indent="    ", subsequent_indent="    ")
    if p.efficiency is not None:
        e = p.efficiency
        lines.append(f"FITTED efficiency ({e.parameters} parameters; costmodel.hardware.mechanisms), {e.method}")
        lines += [f"  on: {d}" for d in e.data]
        lines += [
            f"  fit error {k:28s} n {v.n:6d}  median {v.median_abs_error_pct:5.1f}%  p90 {v.p90_abs_error_pct:5.1f}%"
            for k, v in e.error.items()
        ]
    elif p.kind == "gpu":
        if reference is None:
            lines.append("efficiency: none fitted and none transferable: datasheet roofline only")
        else:
            lines.append(f"efficiency: none fitted on this device; transferred from {reference} by the transfer rule")
            if attention is not None:
                lines.append(
                    f"  attention classes from {attention[0]}, whose attention kernel is of this device's "
                    f"kind ({attention[1].replace('_', ' ')})"
                )
    lines.append("sources:")
    lines += [f"  {k}: {v}" for k, v in p.sources.items()]
    if p.notes:
        lines += ["notes:", *textwrap.wrap(p.notes, 100, initial_indent="  ", subsequent_indent="  ")]
    return "\n".join(lines)


def hardware_records(profiles, status: dict[str, str]) -> list[dict]:
    """The hardware list as rows (SI base units: FLOP/s, B/s, B)."""
    out = []
    for p in profiles:
        peak = p.peak_flops_per_s.get("bf16") or p.peak_flops_per_s.get("fp16")
        fp8 = p.peak_flops_per_s.get("fp8")
        out.append(
            {
                "id": p.id,
                "name": p.name,
                "kind": p.kind,
                "bf16_flops_per_s": peak.value if peak else None,
                "fp8_flops_per_s": fp8.value if fp8 else None,
                "memory_bytes_per_s": p.bandwidth,
                "capacity_bytes": p.capacity,
                "capacity": capacity_text(p.capacity),
                "on_chip_bytes": p.on_chip_memory_bytes.value,
                "efficiency": status[p.id],
                "aliases": ", ".join(p.aliases),
            }
        )
    return out
