"""Every choice list of costmodel, once, and the variant -> key/value heads rule.

Pure Python (no sympy, numpy or pydantic), so the command line can build its help and its choices
without loading the symbolic core.
"""

from __future__ import annotations

import math
import re
from typing import Literal, get_args

from costmodel.core.errors import CostModelError

#: Attention variants: multi-head (g = h), multi-query (g = 1), grouped-query (g key/value heads).
Variant = Literal["mha", "mqa", "gqa"]
#: Programs of the symbolic core (Shazeer 2019, Section 2): the last two are the paper's one-query forms.
Mode = Literal["batched", "incremental", "generate", "single-query", "dot-product"]
#: Modes with every dimension a number, which a device can time.
PredictMode = Literal["batched", "incremental", "generate"]
#: Storage dtypes; tf32 is stored as fp32.
Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]
#: Math dtypes a device may have a peak for: the storage dtypes, and fp4 (4-bit weights times 4-bit activations,
#: Blackwell's NVFP4 GEMMs), which no tensor is stored in but a GEMM's operands.
PeakDtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"]
#: Unfused: every op its own kernel. Fused: flash-style attention (logits and weights stay on chip).
Execution = Literal["unfused", "fused"]
#: KV-cache append: write the new position in place, or copy the whole cache (the paper's tf.concat).
CacheAppend = Literal["inplace", "concat"]
#: Op time = max(compute, memory) + overhead, or compute + memory + overhead.
Overlap = Literal["max", "sum"]

#: How a measured op time was taken: a CUDA-graph replay (serving engines), kernel durations only, or
#: host wall time around an eager op. Predictions are for one of them.
Timing = Literal["graph", "kernels", "eager"]
#: The switchable mechanisms of the fitted time model (costmodel.hardware.mechanisms).
Mechanism = Literal["fixed", "bandwidth", "compute", "tiles", "work_units", "causal", "cache_write", "quantize"]

VARIANTS: tuple[str, ...] = get_args(Variant)
TIMINGS: tuple[str, ...] = get_args(Timing)
MECHANISMS: tuple[str, ...] = get_args(Mechanism)
#: The order in which variants are compared side by side (the speed-ups are over the first).
SIDE_BY_SIDE: tuple[str, ...] = ("mha", "gqa", "mqa")
MODES: tuple[str, ...] = get_args(Mode)
PREDICT_MODES: tuple[str, ...] = get_args(PredictMode)
DTYPES: tuple[str, ...] = get_args(Dtype)
#: Bytes per element of each storage dtype.
DTYPE_BYTES: dict[str, int] = dict(zip(DTYPES, (4, 4, 2, 2, 1, 1)))
EXECUTIONS: tuple[str, ...] = get_args(Execution)
#: Storage dtypes of projection weights: the dtypes above, block-scaled fp8, 4-bit integers (with group scales)
#: and 4-bit floats (MXFP4: an 8-bit power-of-two scale per 32; NVFP4: an FP8 scale per 16).
WEIGHT_DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16", "fp8", "fp8_block", "int8", "int4", "mxfp4", "nvfp4")
CACHE_APPENDS: tuple[str, ...] = get_args(CacheAppend)
OVERLAPS: tuple[str, ...] = get_args(Overlap)

#: Workload parameters (the names of :meth:`costmodel.Workload.create`) -> dimension symbol; all sweepable.
PARAMETER_DIMS: dict[str, str] = {
    "batch": "b",
    "seq": "n",
    "context": "m",
    "d_model": "d",
    "heads": "h",
    "groups": "g",
    "head_dim": "k",
    "value_dim": "v",
}
SWEEP_DIMS = PARAMETER_DIMS

#: A whole number as the command line and a sweep's range take it: ASCII digits (no sign, spaces, underscores,
#: leading zeros or other scripts' digits) and at most one size suffix (k, m, g = 1000^n; K, M, G = 1024^n).
WHOLE = re.compile(r"(?P<digits>0|[1-9][0-9]*)(?P<suffix>[kmgKMG]?)", re.ASCII)
#: A decimal number: ASCII digits with at most one point and an optional exponent (no inf, no nan).
DECIMAL = re.compile(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|\.[0-9]+([eE][-+]?[0-9]+)?", re.ASCII)
#: Size suffixes of whole numbers.
SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}


#: The most digits a whole number is read with: far past any count (2^40 has 13), short of what Python refuses to
#: convert (4,300 digits).
MAX_DIGITS = 1000


def whole(text: str) -> int | None:
    """``text`` as a whole number of :data:`WHOLE`, or None when it is not one (or has more than
    :data:`MAX_DIGITS` digits)."""
    match = WHOLE.fullmatch(text) if isinstance(text, str) else None
    if match is None or len(match["digits"]) > MAX_DIGITS:
        return None
    return int(match["digits"]) * SUFFIXES.get(match["suffix"], 1)


#: The largest dimension or count accepted anywhere (2^40): products of a few stay exact in floats.
MAX_DIM = 1 << 40

#: Key/value heads of GQA when none are given: gcd(h, 8), the 8 of Llama 2 70B and Llama 3.
DEFAULT_GQA_GROUPS = 8

VARIANT_NAMES = {
    "mha": "multi-head (g = h)",
    "mqa": "multi-query (g = 1)",
    "gqa": "grouped-query",
    "mla": "multi-head latent",
}
#: Variants of the symbolic core: the grouped-query family and multi-head latent attention (costmodel.counts.mla).
DERIVE_VARIANTS: tuple[str, ...] = (*VARIANTS, "mla")
#: The two forms of multi-head latent attention: attend in latent space, or materialise keys and values.
MLA_FORMS: tuple[str, ...] = ("absorbed", "naive")
#: An engine's mixture-of-experts kernel: over the rows routed to this device only, or spanning every routed row
#: of its batch (vLLM's fused_moe), see costmodel.model.step.Pricing.
MOE_KERNELS: tuple[str, ...] = ("routed", "fused")
#: How an engine feeds MXFP4 experts on a device with FP4 math (Blackwell's f8f6f4 MMA): bf16 activations, the
#: weights dequantized in the kernel to a bf16 MMA, or activations quantized to MXFP8 for an MMA at the fp8 rate.
MXFP4_ACTIVATIONS: tuple[str, ...] = ("bf16", "mxfp8")
#: How a tensor-parallel all-reduce inside a node is priced: ``custom``, vLLM's custom all-reduce kernel up to
#: 8 MiB and NCCL above (an engine that runs that kernel beside NCCL); ``engine``, the engine's own all-reduce entry
#: point as measured at every size (vLLM's ``tensor_model_parallel_all_reduce``, which picks its custom kernel,
#: symmetric-memory multimem or NCCL by the device and the size), see costmodel.price.op.
ALL_REDUCES: tuple[str, ...] = ("custom", "engine")


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype``; raises :class:`CostModelError` for an unknown name."""
    return DTYPE_BYTES[choice("dtype", dtype, DTYPE_BYTES)]


def choice(kind: str, value: str, choices: tuple[str, ...] | dict) -> str:
    """``value`` lower-cased if it is one of ``choices``; an error naming the valid ones otherwise."""
    if not isinstance(value, str):
        raise CostModelError(f"{kind} must be a string, one of {', '.join(choices)}; got {value!r}"[:300])
    key = value.lower()
    if key not in choices:
        raise CostModelError(f"unknown {kind} {value!r}; valid values are {', '.join(choices)}")
    return key


def check_groups(variant: str, groups: int | None) -> None:
    """``groups`` applies to GQA only, and must be a positive integer."""
    if groups is not None and variant != "gqa":
        raise CostModelError(
            f"groups {groups} is only valid with variant gqa "
            f"({variant} has {'g = h' if variant == 'mha' else 'g = 1'} key/value heads)"
        )
    if groups is not None and (isinstance(groups, bool) or not isinstance(groups, int) or groups < 1):
        raise CostModelError(f"groups must be a positive integer, got {groups!r}")


def kv_heads(variant: str, heads: int, groups: int | None = None) -> int:
    """Key/value heads of ``variant`` with ``heads`` query heads: h (MHA), 1 (MQA), ``groups`` (GQA,
    default gcd(h, 8)); an error when they do not divide ``heads``."""
    variant = choice("variant", variant, VARIANTS)
    check_groups(variant, groups)
    g = {"mha": heads, "mqa": 1}.get(variant) or groups or math.gcd(heads, DEFAULT_GQA_GROUPS)
    check_divisible(heads, g)
    return g


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order, in O(sqrt(n)) steps."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def check_divisible(heads: int, kv: int) -> None:
    """Raise unless ``kv`` key/value heads evenly share ``heads`` query heads."""
    if kv > heads or heads % kv:
        shown = divisors(heads) if heads <= 10**12 else []
        valid = ", ".join(map(str, shown[:24])) + (", ..." if len(shown) > 24 else "")
        raise CostModelError(f"groups {kv} must divide heads {heads}; valid group counts are {valid or 'its divisors'}")


def variant_label(variant: str, g: int) -> str:
    """``MHA (g=32)``, ``GQA (g=8)``, ``MQA (g=1)``."""
    return f"{variant.upper()} (g={g})"


#: Defaults of an attention workload and of a whole-model prediction, the same in Python and on the
#: command line: one decode step of a 7-8B-class layer (d 4096, 32 heads of 128) after 4096 cached
#: positions, 16 sequences, bf16. A whole model runs its attention fused, an attention workload the
#: paper's unfused program.
DEFAULTS: dict[str, object] = {
    "variant": "mha",
    "mode": "incremental",
    "batch": 16,
    "context": 4096,
    "seq": 4096,
    "d_model": 4096,
    "heads": 32,
    "dtype": "bf16",
    "layers": 1,
    "execution": "unfused",
    "model_execution": "fused",
    "cache_append": "inplace",
    "overlap": "max",
    "tp": 1,
    "timing": "graph",
    # the engine a served model runs in when none is named (costmodel predict --engine)
    "engine": "vllm",
    # points in one sweep: 10,000 print in about a second; more is allowed when asked for
    "max_points": 10_000,
}


#: The serving engines modelled, as ``--engine`` spells them, and their names as their projects write them.
ENGINE_NAMES = ("vllm", "sglang", "trtllm", "atom")
#: Whether a timed prompt-attention call also writes the prompt's keys and values into the cache, where a
#: prediction is told (None: as the device's fit says): "in-call" (vLLM before 0.16, SGLang, TensorRT-LLM: the write
#: is a second kernel of the call; where the fit prices none, priced as a kernel of its own,
#: :func:`costmodel.price.transfer.held_write_s`) or "apart" (vLLM 0.16 on: the write is an op of its own, outside
#: the call: the ``cache_write`` mechanism off).
PROMPT_WRITES = ("in-call", "apart")
#: The formats of one GEMM ``costmodel predict --gemm`` prices (costmodel.price.gemm.GEMM_FORMATS).
GEMM_DTYPES = ("bf16", "fp8", "fp8_block", "nvfp4")
#: What a recommendation minimises under its latency targets: GPUs, dollars per hour, or joules per output token.
OBJECTIVES = ("gpus", "cost", "energy")
ENGINE_TITLES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "atom": "ATOM"}
