"""The mixture-of-experts block (router and grouped expert GEMMs, costmodel.model_ops) against vLLM's measured
fused MoE layers (aiconfigurator's moe/ tables, balanced routing), which no fit saw: Qwen3-235B's shape on the
H100 and DeepSeek-V3's on the B200, per weight format and tensor- or expert-parallel group of at most 8 GPUs.

    python benchmarks/moe_layers.py [MEASUREMENTS_DIR]

Prints the median and p90 |error| and the median predicted/measured per group.
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

import costmodel
from costmodel.model_ops import _moe_ops
from costmodel.model_step import op_time, pricing

#: Table file, profile, preset and the table's (hidden, expert width, experts, top-k) of that preset.
CASES = [("h100_sxm_vllm_0.19.0_moe_perf.csv", "h100", "qwen3-235b-a22b", ("4096", "1536", "128", "8")),
         ("b200_sxm_vllm_0.19.0_moe_perf.csv", "b200", "deepseek-v3", ("7168", "2048", "256", "8"))]
WEIGHTS = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4"}


def main(folder: Path) -> None:
    for name, gpu, model, shape in CASES:
        path = folder / "aiconfigurator" / "moe" / name
        with open(path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["distribution"] == "balanced" and r["moe_dtype"] in WEIGHTS
                    and (r["hidden_size"], r["inter_size"], r["num_experts"], r["topk"]) == shape]
        groups = defaultdict(list)
        for r in rows:
            tp, ep = int(r["moe_tp_size"]), int(r["moe_ep_size"])
            if max(tp, ep) <= 8:
                groups[(r["moe_dtype"], tp, ep)].append(r)
        m, hw = costmodel.load_model(model), costmodel.load_profile(gpu)
        print(f"{gpu}: {model}'s MoE block ({name})")
        for (dtype, tp, ep), rs in sorted(groups.items()):
            pr = pricing(m, hw, tp=max(tp, ep), weight_dtype=WEIGHTS[dtype], expert_parallel=ep > 1)
            dev = pr.slice(m)
            ratio = np.array([sum(float(op_time(s, pr).time) for s in _moe_ops(dev, int(r["num_tokens"]), 1,
                                                                                  pr.precision)
                                  if s.name.startswith(("experts", "router"))) / (float(r["latency"]) * 1e-3)
                              for r in rs])
            err = np.abs(ratio - 1)
            print(f"  {dtype:9s} tp {tp} ep {ep}  n {len(rs):3d}  median |err| {np.median(err):5.1%}  p90 "
                  f"{np.percentile(err, 90):5.1%}  predicted/measured {np.median(ratio):.2f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "shared" / "measurements")
