"""Attention predictions across devices and sweeps, as tables."""

from __future__ import annotations

from costmodel.core.vocab import variant_label
from costmodel.render.text import aligned, band_cell, capacity_text, si, workload_label, workload_line


def attention_devices_table(hws, comparisons) -> str:
    """One attention workload on several devices: one row per device and variant."""
    w = comparisons[0][0].workload
    lines = [workload_line(w), ""]
    rows = [("device", "variant", "time", "range", "tokens/s", "bound", "speed-up", "KV + weights", "capacity", "fits")]
    for hw, comp in zip(hws, comparisons):
        base = comp[0].total.time_s
        for p in comp:
            mem = p.memory
            rows.append(
                (
                    hw.id,
                    variant_label(p.workload.variant, p.workload.g),
                    si(p.total.time_s, "s"),
                    band_cell(p.total.band),
                    si(p.total.tokens_per_s),
                    p.total.bound,
                    f"{base / p.total.time_s:.2f}x",
                    si(mem.kv_cache_bytes + mem.weight_bytes, "B"),
                    capacity_text(mem.capacity_bytes),
                    "yes" if mem.fits else "NO",
                )
            )
    lines += aligned(rows, right={2, 3, 4, 6, 7, 8})
    per = (
        "the whole batched call"
        if w.mode == "batched"
        else f"one decode step (each of the b={w.b} sequences gains a token)"
    )
    lines += [
        "",
        "Columns:",
        f"  - time: {per} through this one attention layer; range: where its measured time is expected to "
        "fall (80% of published kernel timings); tokens/s: tokens the batch gains a second through this "
        "layer alone, not a whole model's rate",
        "  - bound: the longer of its ops' compute and memory at the device's fitted rates; speed-up: over "
        "each device's first variant; KV + weights: this layer's bytes against the device's capacity (with "
        "one device, every op and the assumptions are printed)",
    ]
    return "\n".join(lines)


def sweeps_table(sweeps) -> str:
    """One attention sweep on several devices: one row per value, one column per (device, variant)."""
    first = sweeps[0]
    name, values = first.parameter, first.values
    lines = [
        f"sweep of {name} ({first.dim}) on {', '.join(sw.hardware.id for sw in sweeps)}; time per step or "
        "call (each device's time model: "
        + "; ".join(f"{sw.hardware.id} {sw.hardware.efficiency or 'datasheet roofline'}" for sw in sweeps)
        + "); * = does not fit in memory"
    ]
    head, columns = [name], []
    for sw in sweeps:
        for i, w in enumerate(sw.workloads):
            head.append(f"{sw.hardware.id} " + (workload_label(w) if name != "groups" else w.variant.upper()))
            columns.append(sw.records[i * len(values) : (i + 1) * len(values)])
    rows = [tuple(head)]
    for j, x in enumerate(values):
        rows.append((str(x), *[si(col[j]["time_s"], "s") + ("" if col[j]["fits"] else " *") for col in columns]))
    lines += aligned(rows, right=range(len(head)))
    return "\n".join(lines)
