"""The mixture-of-experts block (router and grouped expert GEMMs, :mod:`costmodel.model.ops`) against vLLM's
measured fused MoE layers (aiconfigurator's ``moe/`` tables): the rows of one layer shape, weight format, tensor-
and expert-parallel size and routing as a :class:`MoETable`, the block's predicted time of each row, and the fit
of a device's MoE kernel classes (``moe``, ``moe_fp8``, ...: the grouped expert GEMMs in the engine's fused
kernel) on those tables.

The collector (ai-dynamo/aiconfigurator collector/vllm/collect_moe.py) times ``fused_experts`` on one GPU holding
that GPU's share of the experts (an expert map under expert parallel) for all ``num_tokens`` tokens: vLLM's Triton
kernel for bf16, fp8 and fp8_block, FlashInfer's TensorRT-LLM kernel for NVFP4 (``kernel_source``), with the
tokens routed evenly (``balanced``) or by a power law (the busiest device's share timed).
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

#: The tables' moe_dtype -> costmodel's weight dtype.
#: int4_wo: int4 weights with a 16-bit scale per group of 128, 16-bit activations (:data:`SPANNING`).
#: w4a16_mxfp4: vLLM's MXFP4 experts with bf16 activations (the B200's table: gpt-oss's layer shapes).
WEIGHTS = {
    "bfloat16": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
    "int4_wo": "int4",
    "w4a16_mxfp4": "mxfp4",
}
#: The formats the MoE classes are fitted on: every one but MXFP4 with bf16 activations, another kernel than the
#: int4 rows the W4A16 class is fitted on, kept to score that class on a kernel it did not see.
FITTED = tuple(k for k in WEIGHTS if k != "w4a16_mxfp4")
#: The table of each profile with one, under the measurements folder.
TABLES = {
    "h100_sxm": "aiconfigurator/moe/h100_sxm_vllm_0.19.0_moe_perf.csv",
    "b200": "aiconfigurator/moe/b200_sxm_vllm_0.19.0_moe_perf.csv",
}
#: The tables' kernels that span every routed row of the call under an expert map: vLLM's fused_experts, also for
#: int4 weights (the collector's ``vllm_marlin_int4_moe`` rows call fused_experts with int4_w4a16_moe_quant_config,
#: symmetric, a group of 128: ai-dynamo/aiconfigurator collector/vllm/collect_moe_v2.py run_moe_torch).
SPANNING = ("vllm_fused_moe", "vllm_marlin_int4_moe")
#: The largest tensor- or expert-parallel group predicted: one node.
MAX_GROUP = 8
#: What a fit of a MoE class frees: the fused kernel's fraction of the dense peak on large products and the
#: achieved-bandwidth curve at which it streams the experts' weights (ceiling, half-bandwidth size, exponent); the
#: tiles' prologue and epilogue and the fixed costs are the dense class's. Where the device's grouped kernel fixes
#: its tile (``KernelFacts.grouped_dispatch``) it runs that tile; the fit frees the same four.
MOE_FREE = ("compute_efficiency", "bandwidth_ceiling", "bandwidth_half_bytes", "bandwidth_exponent")
#: What a fit of the W4A16 class frees: the Triton kernel's fraction of the bf16 peak only. Its calls at or below
#: vLLM's kernel switch run another kernel (costmodel.hardware.mechanisms.w4a16_small_call), priced as the dense class, and
#: above it the kernel is bound by its main loop's dequantization, not by streaming the 4-bit weights.
W4A16_FREE = ("compute_efficiency",)
#: The scale of the MoE fit's soft-L1 loss, in log(predicted / measured): a row missed by less weighs as its square,
#: one missed by more as its distance. Some layers are timed at 2-5x their neighbours in tokens (FlashInfer's NVFP4
#: kernel on the B200: one shape at 1,024 tokens takes 541 µs, at 6,144 tokens 182 µs, with the kernel's tactic chosen
#: for another size, which no mechanism of the block describes); squared, each such row pulls every other row's
#: prediction up (the NVFP4 fit's median predicted / measured was 1.10). 0.1 is the size of the misses the mechanisms
#: leave on the H100's tables (their median |error| 3-5%, p90 13-14%).
ROBUST_SCALE = 0.1


def soft_l1(r, scale: float = ROBUST_SCALE):
    """The residuals whose squares sum to the soft-L1 loss of ``r``: ``2 s^2 (sqrt(1 + (r/s)^2) - 1)`` each, which
    is ``r^2`` for small ``r`` and ``2 s |r|`` for large."""
    r = np.asarray(r, float)
    return np.sign(r) * scale * np.sqrt(2 * (np.sqrt(1 + (r / scale) ** 2) - 1))


@dataclass(frozen=True)
class MoETable:
    """The rows of one layer shape, weight format, tensor- and expert-parallel size and routing."""

    shape: tuple[int, int, int, int]  # hidden, expert width, experts, experts per token
    moe_dtype: str
    tp: int
    ep: int
    distribution: str
    kernel_source: str
    tokens: np.ndarray
    measured_s: np.ndarray

    @property
    def weight_dtype(self) -> str:
        return WEIGHTS[self.moe_dtype]

    @property
    def routing(self) -> str:
        """The table's ``distribution`` as :attr:`costmodel.model.presets.MoEShape.routing` (power_law_1.2 ->
        power-law:1.2)."""
        return routing(self.distribution)


def routing(distribution: str) -> str:
    return distribution.replace("power_law_", "power-law:")


def read_tables(path: str | Path, *, distributions=None, max_group: int = MAX_GROUP, formats=FITTED) -> list[MoETable]:
    """Every :class:`MoETable` of a ``moe/`` file in ``formats`` (the tables' ``moe_dtype``, of :data:`WEIGHTS`)
    with tp and ep at most ``max_group`` (``distributions``: those routings only)."""
    groups: dict = defaultdict(list)
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r["moe_dtype"] not in formats or (distributions and r["distribution"] not in distributions):
                continue
            tp, ep = int(r["moe_tp_size"]), int(r["moe_ep_size"])
            if max(tp, ep) > max_group:
                continue
            shape = tuple(int(r[k]) for k in ("hidden_size", "inter_size", "num_experts", "topk"))
            groups[(shape, r["moe_dtype"], tp, ep, r["distribution"], r["kernel_source"])].append(
                (int(r["num_tokens"]), float(r["latency"]) * 1e-3)
            )
    out = []
    for key, rows in sorted(groups.items()):
        rows.sort()
        out.append(MoETable(*key, np.array([t for t, _ in rows]), np.array([s for _, s in rows])))
    return out


@lru_cache(maxsize=64)
def block_model(shape: tuple[int, int, int, int]):
    """A model whose mixture-of-experts layer has the table's shape (a gated block, no shared experts); built once
    per shape (a fit prices the same tables hundreds of times)."""
    from costmodel.model.presets import load_model

    hidden, width, experts, top = shape
    base = load_model("qwen3-235b-a22b")  # 64 query heads: any tensor-parallel group of a node divides them
    return base.model_copy(
        update={
            "d_model": hidden,
            "moe": base.moe.model_copy(
                update={"experts": experts, "experts_per_token": top, "expert_d_ff": width, "shared_d_ff": 0}
            ),
        }
    )


def predict(table: MoETable, hw) -> np.ndarray:
    """Predicted seconds of every row: the block's router and expert ops on one device of the tp x ep group,
    the tokens routed as the table's distribution says, through the table's kernel (vLLM's Triton fused_moe spans
    every routed row; FlashInfer's NVFP4 kernel only those of the device's experts)."""
    from costmodel.model.ops import moe_ops
    from costmodel.model.pricing import pricing
    from costmodel.model.step import op_time

    m = block_model(table.shape)
    m = m.model_copy(update={"moe": m.moe.model_copy(update={"routing": table.routing})})
    pr = pricing(m, hw, tp=max(table.tp, table.ep), weight_dtype=table.weight_dtype, expert_parallel=table.ep > 1)
    spans_all = table.kernel_source in SPANNING
    ops = moe_ops(pr.slice(m), table.tokens, 1, pr.precision, spans_all=spans_all)
    return sum(
        np.asarray(op_time(s, pr).time, float) * np.ones(table.tokens.shape)
        for s in ops
        if s.name.startswith(("experts", "router"))
    )


def moe_class(table: MoETable) -> str:
    """The efficiency class of a table's expert GEMMs."""
    from costmodel.hardware.mechanisms import LOW_PRECISION_GEMM, MOE_GEMM, W4A16_MOE

    if table.weight_dtype in ("int4", "mxfp4"):
        return W4A16_MOE
    return MOE_GEMM[LOW_PRECISION_GEMM.get(table.weight_dtype, "gemm")]


def with_classes(hw, classes: dict):
    """``hw`` pricing with ``classes`` as its own fitted parameters (and no others)."""
    from costmodel.hardware.profile import Efficiency

    return hw.model_copy(update={"efficiency": Efficiency(data=("-",), method="-", classes=classes)})


def with_class(hw, cls: str, eff):
    """``hw`` with ``eff`` as its own parameters of class ``cls``."""
    classes = {**hw.efficiency.classes, cls: eff}
    return hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update={"classes": classes})})


def dense_class(hw, cls: str):
    """The parameters ``hw`` prices MoE class ``cls`` with when it has no fit of it: its dense class of the same
    weights (:data:`costmodel.hardware.mechanisms.FALLBACK`)."""
    from costmodel.hardware.mechanisms import FALLBACK

    return hw.efficiency.classes[FALLBACK[cls]]


def fit_moe_class(tables: list[MoETable], hw, names=None):
    """A MoE class's parameters fitted on ``tables`` (all of one class): the device's own dense class of the same
    weights (its fallback) with ``names`` (:data:`MOE_FREE`; the W4A16 class :data:`W4A16_FREE`) fitted on
    log(predicted / measured) under the soft-L1 loss (:func:`soft_l1`; :mod:`costmodel.validation.fit`'s search from
    three starts)."""
    from costmodel.hardware.mechanisms import W4A16_MOE
    from costmodel.validation.fit import levenberg_marquardt, to_z, with_fitted

    cls = moe_class(tables[0])
    # the dense class's own input quantize is not the MoE kernel's (the MoE classes have no such mechanism)
    update = {"fitted": (), "at_bound": {}, "quantize_input": False}
    names = names or (W4A16_FREE if cls == W4A16_MOE else MOE_FREE)
    start = dense_class(hw, cls).model_copy(update=update)
    measured = np.concatenate([t.measured_s for t in tables])

    def residual(z):
        dev = with_class(hw, cls, with_fitted(start, names, z, "graph"))
        return soft_l1(np.log(np.concatenate([predict(t, dev) for t in tables]) / measured))

    inits = {
        "compute_efficiency": (0.6, 0.4, 0.85),
        "bandwidth_ceiling": (0.85, 0.7, 0.95),
        "bandwidth_half_bytes": (1e6, 1e7, 1e5),
        "bandwidth_exponent": (0.5, 1.0, 0.3),
    }
    best = min(
        (levenberg_marquardt(residual, [to_z(n, inits[n][i]) for n in names]) for i in range(3)), key=lambda zc: zc[1]
    )
    eff = with_fitted(start, names, best[0], "graph")
    return eff.model_copy(update={"fitted": tuple(sorted(names))})


def errors(tables: list[MoETable], hw) -> dict:
    """n, median and p90 |error| (percent) and the median predicted / measured over ``tables``."""
    ratio = np.concatenate([predict(t, hw) / t.measured_s for t in tables])
    err = np.abs(ratio - 1) * 100
    return {
        "n": int(err.size),
        "median_abs_error_pct": round(float(np.median(err)), 2),
        "p90_abs_error_pct": round(float(np.percentile(err, 90)), 2),
        "median_ratio": round(float(np.median(ratio)), 3),
    }
