"""The mixture-of-experts block (router and grouped expert GEMMs, :mod:`costmodel.model_ops`) against vLLM's
measured fused MoE layers (aiconfigurator's ``moe/`` tables): the rows of one layer shape and routing, grouped by
weight format and tensor- and expert-parallel sizes, and the block's predicted over measured time on each row.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

#: The tables' moe_dtype -> costmodel's weight dtype.
WEIGHTS = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4"}


def read_moe_rows(path: str | Path, shape: tuple[str, str, str, str], distribution: str = "balanced"
                  ) -> dict[tuple[str, int, int], list[dict]]:
    """(moe_dtype, tp, ep) -> rows of a ``moe/`` table with ``shape`` = (hidden, expert width, experts, top-k) and
    the given routing distribution, for the weight formats of :data:`WEIGHTS`."""
    groups: dict = defaultdict(list)
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if (r["hidden_size"], r["inter_size"], r["num_experts"], r["topk"]) == shape and \
                    r["distribution"] == distribution and r["moe_dtype"] in WEIGHTS:
                groups[(r["moe_dtype"], int(r["moe_tp_size"]), int(r["moe_ep_size"]))].append(r)
    return dict(groups)


def predicted_over_measured(m, hw, rows: list[dict], moe_dtype: str, tp: int, ep: int) -> np.ndarray:
    """The block's router and expert ops of one device of the tp x ep group, priced for each row's tokens, over
    the row's measured latency."""
    from costmodel.model_ops import _moe_ops
    from costmodel.model_step import op_time, pricing

    pr = pricing(m, hw, tp=max(tp, ep), weight_dtype=WEIGHTS[moe_dtype], expert_parallel=ep > 1)
    dev = pr.slice(m)
    return np.array([sum(float(op_time(s, pr).time) for s in _moe_ops(dev, int(r["num_tokens"]), 1, pr.precision)
                         if s.name.startswith(("experts", "router"))) / (float(r["latency"]) * 1e-3) for r in rows])
