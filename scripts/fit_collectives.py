"""Fit the collective curves (all-reduce per implementation; NCCL's all-gather, reduce-scatter and all-to-all)
of every GPU with published collective tables and write them into its profile; print each curve's error on its
own table and, carried by the transfer rule from the H100's curves, on the other GPUs' tables.

    python scripts/fit_collectives.py ../shared/measurements/aiconfigurator/comm [--write]
"""

from __future__ import annotations

import sys
from pathlib import Path

import costmodel
from costmodel.validation.collectives import TABLES, VOLUME, errors, fit_device, read_nccl_ops, read_tables

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "aiconfigurator (ai-dynamo/aiconfigurator@095f58a) comm/"
METHOD = (
    "t(S) = latency + v (n - 1) / n * S / bus bandwidth per collective, implementation and GPU count (v = 2 "
    "for an all-reduce, 1 for an all-gather, a reduce-scatter and an all-to-all; S the buffer NCCL names), or "
    "the faster of two such lines (large_latency_s, large_bus_bytes_per_s: the protocol or algorithm the "
    "implementation switches to for large buffers) where two fit better: each line fitted by least squares on "
    "log time over a grid of latencies and bandwidths, the split of the sizes between them the one of least "
    "error (scripts/fit_collectives.py); the 16-bit NCCL rows, the bf16 rows of the custom all-reduce of "
    "vLLM"
)


def yaml_block(profile: str, fit: dict) -> str:
    nccl, custom = TABLES[profile]
    lines = [
        "# Fitted, not datasheet: collective curves (costmodel.price.op), fitted on the tables in `data`; `error` is",
        "# the fit's error on them.",
        "collectives:",
        "  data:",
        f"  - {SOURCE}{nccl}",
        f"  - {SOURCE}{custom}",
        f"  method: '{METHOD}'",
        "  curves:",
    ]
    for part in ("curves", "ops"):
        if part == "ops":
            lines.append("  ops:")
        for impl, by_n in fit[part].items():
            lines.append(f"    {impl}:")
            for n, c in sorted(by_n.items()):
                lines.append(f"      {n}: {{" + ", ".join(f"{k}: {v:.4g}" for k, v in c.items()) + "}")
    lines.append("  error:")
    for key, e in fit["error"].items():
        lines.append(
            f"    {key}: {{n: {e['n']}, median_abs_error_pct: {e['median_abs_error_pct']:.2f}, "
            f"p90_abs_error_pct: {e['p90_abs_error_pct']:.2f}}}"
        )
    return "\n".join(lines) + "\n"


def main(folder: str, write: bool) -> None:
    fits = {p: fit_device(folder, p) for p in TABLES}
    for p, fit in fits.items():
        for key, e in fit["error"].items():
            print(
                f"{p:14s} {key:15s} own fit: n {e['n']:3d}, median {e['median_abs_error_pct']:5.1f}%, "
                f"p90 {e['p90_abs_error_pct']:5.1f}%"
            )
    ref = costmodel.load_profile("h100_sxm")
    for p in ("a100_80gb_sxm", "b200"):
        hw = costmodel.load_profile(p)
        scale = hw.interconnect_bytes_per_s.value / ref.interconnect_bytes_per_s.value
        for (impl, n), (size, sec) in sorted({**read_tables(folder, p), **read_nccl_ops(folder, p)}.items()):
            c = {**fits["h100_sxm"]["curves"], **fits["h100_sxm"]["ops"]}[impl][n]
            k, med, p90 = errors(size, sec, n, c, VOLUME.get(impl, 2), scale)
            print(
                f"{p:14s} {impl}/{n:<5d} transferred from h100_sxm (bandwidth x {scale:.2f}): median {med:5.1f}%, "
                f"p90 {p90:5.1f}%"
            )
    if write:
        for p, fit in fits.items():
            path = ROOT / "hardware_profiles" / f"{costmodel.load_profile(p).id}.yaml"
            text = path.read_text(encoding="utf-8")
            if "\ncollectives:" in text:
                start = text.index("# Fitted, not datasheet: collective curves")
                end = text.find("\n# Fitted, not datasheet:", start + 1)  # a block after it (efficiency) stays
                text = text[:start] + (text[end + 1 :] if end >= 0 else "")
            path.write_text(text.rstrip("\n") + "\n" + yaml_block(p, fit), encoding="utf-8")
            print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/measurements/aiconfigurator/comm", "--write" in sys.argv)
