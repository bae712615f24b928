"""The mixture-of-experts block (router and grouped expert GEMMs, costmodel.model_ops) against vLLM's measured
fused MoE layers (aiconfigurator's moe/ tables, balanced routing), which no fit saw: Qwen3-235B's shape on the
H100 and DeepSeek-V3's on the B200, per weight format and tensor- or expert-parallel group of at most 8 GPUs.

    python benchmarks/moe_layers.py [MEASUREMENTS_DIR]

Prints the median and p90 |error| and the median predicted/measured per group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import costmodel
from costmodel.validation.moe_layers import predicted_over_measured, read_moe_rows

#: Table file, profile, preset and the table's (hidden, expert width, experts, top-k) of that preset.
CASES = [("h100_sxm_vllm_0.19.0_moe_perf.csv", "h100", "qwen3-235b-a22b", ("4096", "1536", "128", "8")),
         ("b200_sxm_vllm_0.19.0_moe_perf.csv", "b200", "deepseek-v3", ("7168", "2048", "256", "8"))]


def main(folder: Path) -> None:
    for name, gpu, model, shape in CASES:
        groups = read_moe_rows(folder / "aiconfigurator" / "moe" / name, shape)
        m, hw = costmodel.load_model(model), costmodel.load_profile(gpu)
        print(f"{gpu}: {model}'s MoE block ({name})")
        for (dtype, tp, ep), rows in sorted(groups.items()):
            if max(tp, ep) > 8:
                continue
            ratio = predicted_over_measured(m, hw, rows, dtype, tp, ep)
            err = np.abs(ratio - 1)
            print(f"  {dtype:9s} tp {tp} ep {ep}  n {len(rows):3d}  median |err| {np.median(err):5.1%}  p90 "
                  f"{np.percentile(err, 90):5.1%}  predicted/measured {np.median(ratio):.2f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "shared" / "measurements")
