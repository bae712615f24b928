"""The mixture-of-experts block (router, grouped expert GEMMs, activation, combine: costmodel.model.ops) against
vLLM's measured fused MoE layers (aiconfigurator's moe/ tables: 12 layer shapes on the H100, 19 on the B200;
tensor- or expert-parallel groups of up to 8), per GPU and weight format:

* balanced routing, with the profile as it is (its MoE classes fitted on these rows: scripts/fit_published.py);
* the same rows priced with the device's dense GEMM class instead (no MoE fit), which shows what the fit adds;
* a fit on half the layer shapes, scored on the other half (shapes that fit did not see);
* power-law routing (exponents 1.01 and 1.2: the busiest device timed), which no fit saw;
* the H100's MoE classes carried to the B200 by the transfer rule (costmodel.price.origin.transfer);
* the W4A16 class (int4 weights) above vLLM's kernel switch, the calls it describes, and on the B200 vLLM's MXFP4
  experts with bf16 activations (gpt-oss's layers), another kernel no fit saw.

    python benchmarks/moe_layers.py [MEASUREMENTS_DIR]

Prints n, median and p90 |error| and the median predicted/measured per group.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import costmodel
from costmodel.hardware.mechanisms import W4A16_MOE, w4a16_small_call
from costmodel.price.transfer import transfer
from costmodel.validation.moe_layers import (
    TABLES,
    dense_class,
    errors,
    fit_moe_class,
    moe_class,
    read_tables,
    with_class,
)

PROFILES = {"h100_sxm": "h100", "b200": "b200"}


def line(label: str, e: dict) -> str:
    return (
        f"    {label:34s} n {e['n']:5d}  median {e['median_abs_error_pct']:5.1f}%  p90 "
        f"{e['p90_abs_error_pct']:5.1f}%  predicted/measured {e['median_ratio']:.2f}"
    )


def without_moe_fit(hw, cls):
    """``hw`` pricing class ``cls`` with its dense fallback's parameters."""
    return with_class(hw, cls, dense_class(hw, cls))


def main(folder: Path) -> None:
    tables = {pid: read_tables(folder / path) for pid, path in TABLES.items()}
    hws = {pid: costmodel.load_profile(PROFILES[pid]) for pid in TABLES}
    for pid, ts in tables.items():
        hw = hws[pid]
        print(f"{pid} ({TABLES[pid]})")
        for cls in sorted({moe_class(t) for t in ts}):
            mine = [t for t in ts if moe_class(t) == cls]
            balanced = [t for t in mine if t.distribution == "balanced"]
            skewed = [t for t in mine if t.distribution != "balanced"]
            print(f"  {cls} ({', '.join(sorted({t.moe_dtype for t in mine}))})")
            print(line("balanced, the profile", errors(balanced, hw)))
            print(line("balanced, the dense class", errors(balanced, without_moe_fit(hw, cls))))
            shapes = sorted({t.shape for t in balanced})
            half = set(shapes[::2])
            eff = fit_moe_class([t for t in balanced if t.shape in half], without_moe_fit(hw, cls))
            print(
                line(
                    f"balanced, other {len(shapes) - len(half)} shapes (fit on {len(half)})",
                    errors([t for t in balanced if t.shape not in half], with_class(hw, cls, eff)),
                )
            )
            for dist in sorted({t.distribution for t in skewed}):
                print(line(f"{dist}, the profile", errors([t for t in skewed if t.distribution == dist], hw)))
            if pid == "b200" and cls in hws["h100_sxm"].efficiency.classes:
                moved = transfer(hws["h100_sxm"].efficiency.classes[cls], hws["h100_sxm"], hw, cls)
                print(line("balanced, the H100's fit transferred", errors(balanced, with_class(hw, cls, moved))))
            if cls == W4A16_MOE:  # the class describes vLLM's Triton kernel: the calls above its kernel switch
                print(line("balanced, above the kernel switch", errors(above_switch(balanced), hw)))
                print(line("power-law, above the kernel switch", errors(above_switch(skewed), hw)))
        if pid == "b200":  # vLLM's MXFP4 experts with bf16 activations: another kernel, which no fit saw
            mx = [
                t
                for t in read_tables(folder / TABLES[pid], distributions=("balanced",), formats=("w4a16_mxfp4",))
                if t.tp == t.ep == 1
            ]
            print("  MXFP4 experts, bf16 activations (gpt-oss's layers, one GPU; no fit saw them)")
            print(line("above the kernel switch, the profile", errors(above_switch(mx), hw)))
            print(
                line(
                    "above the kernel switch, the dense class", errors(above_switch(mx), without_moe_fit(hw, W4A16_MOE))
                )
            )
            print(line("at or below it, the profile (dense)", errors(above_switch(mx, below=True), hw)))


def above_switch(tables, below: bool = False):
    """The rows of ``tables`` above vLLM's W4A16 kernel switch (``below``: at or below it)."""
    out = []
    for t in tables:
        keep = w4a16_small_call(t.tokens, t.shape[3], t.shape[2] // max(t.ep, 1)) == below
        if keep.any():
            out.append(dataclasses.replace(t, tokens=t.tokens[keep], measured_s=t.measured_s[keep]))
    return out


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "shared" / "measurements")
