"""From counts to time on a real device: named, physical mechanisms on top of the roofline.

The roofline (FLOPs over the dense peak, bytes over the datasheet bandwidth) is a lower bound. A real
kernel also pays, and each of these is one switchable mechanism with fitted parameters
(:class:`costmodel.hardware.profile.ClassEfficiency`, per op class):

``fixed``
    a cost per call that depends on the op class and on how the time was taken: ``graph`` (a CUDA
    graph replay, what serving engines run; GPU-side start-up and tail of every kernel of the call),
    ``kernels`` (the sum of kernel durations, no gaps), ``eager`` (host wall time around an eager op:
    dispatch, launch and synchronisation).
``bandwidth``
    achieved bandwidth rises with the bytes a kernel moves and levels off below the datasheet:
    ``ceiling * peak / (1 + (half_bytes / bytes) ** exponent)``. A CPU GEMM with more than one row also
    makes ``pack_passes`` extra passes over its K x N operand (packing it into panels; GEMV does not).
``compute``
    a large kernel reaches a fraction of the dense peak (``compute_efficiency``).
``tiles``
    GEMMs compute whole output tiles in whole waves over the SMs: the library picks the one of the device's
    GEMM tiles (:class:`costmodel.hardware.profile.KernelFacts`) that finishes first, a smaller tile running at
    ``(area / largest area) ** small_tile_exponent`` of the large tile's rate; when there are fewer tiles than SMs the reduction is
    split over them (split-K, at least ``split_k_min`` deep; the partial sums are reduced by a second
    kernel, ``split_s``), and every tile pays a prologue and epilogue worth ``tile_k_overhead`` steps of its
    reduction. A class whose kernel fixes its tile by shape (``KernelFacts.gemm_dispatch``: vLLM's CUTLASS fp8
    GEMM) runs that tile for a single product, unsplit; one whose grouped kernel fixes its tile
    (``KernelFacts.grouped_dispatch``: vLLM's Triton fused MoE kernel, its default configuration chosen by the
    tokens of the call) runs that tile for every expert's product, unsplit, at the class's own rate. Prefill
    attention runs whole waves of query tiles: ``prefill_block`` square ones, or the kernel's own rows by
    key positions (:func:`costmodel.hardware.profile.prefill_tile`: FlashAttention-2's 64-row split-KV tiles). A device
    priced by its datasheet whose matrix unit is a systolic array (a two-dimensional ``matrix_tile``: a TPU's
    MXU) runs every product in whole passes of the array (:func:`systolic_flops`): a tile of the stationary
    operand holds the array for at least as many cycles as it has rows, however few query rows stream through it.
``work_units``
    decode attention costs ``unit_sm_s`` of one SM per (sequence, key/value head) work unit, spread over
    the SMs, plus ``split_s`` for the split-KV combine kernel once the context spans more than one block
    of ``decode_block`` positions (split-KV keeps long contexts at full bandwidth with few work units).
    A kernel that splits contexts only when query heads share a key/value head (``split_kv="grouped"``:
    FlashAttention-2's variable-length decode packs a group's queries into one tile and splits only then)
    runs a group of one as one SM per work unit over the whole context, in waves over the SMs: its
    memory time is at least ``ceil(units / SMs) * bytes per unit / unsplit_sm_bandwidth``; and the
    transpose that packs the queries is copied in and out (``group_copy_s`` more fixed cost) when there is
    more than one sequence and more than one key/value head.
``cache_write``
    a serving engine's prefill call may also write the prompt's keys and values into the (paged) cache: a
    second kernel that reads and writes ``b n g (k + v)`` elements at ``cache_write_ceiling`` of the
    datasheet bandwidth (None where the engine writes the cache outside the attention call).
``quantize``
    a low-precision linear layer (``gemm_fp8``, ``gemm_fp8_block``, ``gemm_nvfp4``) whose fit says so
    (``quantize_input``) first quantizes its activations in a kernel of its own: it reads the ``M x K`` input
    at its width and writes it in the narrow format with its scales (:data:`QUANTIZED_WIDTH` bytes per element),
    at the class's achieved-bandwidth curve, a second kernel of the call (vLLM's ``scaled_fp8_quant`` before
    its CUTLASS GEMM; a per-group or NVFP4 quantize before a block-scaled one).
``causal``
    a fused causal prefill computes only the unmasked query-key pairs: ``n m - n (n - 1) / 2`` of the
    ``n m`` the paper's program counts (queries are the last ``n`` of ``m`` positions), and an unfused
    mask op reads one broadcast ``[n, m]`` causal mask, not the paper's ``[b, h, n, m]``; with ``tiles`` on,
    in whole blocks of the kernel's tile, the diagonal blocks computed whole. Each computed score also
    costs ``score_s`` of the device (the exponential and rescaling of online softmax, which does not
    shrink with the head dimension), and each query tile ``tile_s`` of its SM (its prologue and epilogue).

An op's time is ``fixed + max(compute, memory) + work units``; compute and memory add up instead where the
class's kernel does one after the other (its fitted ``overlap`` is ``sum``: on a CPU, the core that streams
a block of K/V or a packed panel also computes on it; a synchronous prompt kernel, FlashAttention-2, whose warps
wait for each key and value block before multiplying it: :func:`takes_turns`) or where the caller asks for
``overlap="sum"``.
Everything works on numpy arrays, so a validation over 100,000 published timings is one call per class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

import numpy as np

from costmodel.core.vocab import MECHANISMS, TIMINGS
from costmodel.hardware.kernels import (
    ATTENTION_KERNEL_KINDS,
    EfficiencyClassName,
    GemmClassName,
    KernelFacts,
    prefill_tile,
)
from costmodel.hardware.shapes import fa2_splits
from costmodel.hardware.tiles import (
    DEFAULT_KERNELS,
    blocked_causal_pairs,
    causal_pairs,
    dispatched_flops,
    gemm_candidates,
    windowed_pairs,
)

CLASSES: tuple[str, ...] = get_args(EfficiencyClassName)


#: Op class of each kind of program op (:func:`costmodel.counts.program.op_class`); softmax is a row reduction.
PROGRAM_CLASS = {
    "projection": "gemm",
    "attention": "attention_einsum",
    "fused_decode": "decode_attention",
    "fused_prefill": "prefill_attention",
    "elementwise": "elementwise",
    "copy": "copy",
}
#: A class a device has no fit for takes another's: an fp8 GEMM (one scale per tensor) the bf16 GEMM's, a block-
#: scaled fp8 GEMM the per-tensor one's; a mixture of experts' grouped GEMMs the dense GEMM's of their weights (weight-
#: only 4-bit experts, ``moe_w4a16``, the bf16 dense GEMM's: a dense GEMM that dequantizes its weights); an
#: unfused attention's einsums are batched GEMMs; a cache write, a gated activation and a rotary embedding are
#: elementwise kernels; a LayerNorm and a softmax are row reductions like an RMSNorm. A parent class without a timing
#: convention's fixed cost takes its first child's here that has one (the launch of a kernel of the same kind).
FALLBACK = {
    "gemm_fp8": "gemm",
    "gemm_fp8_block": "gemm_fp8",
    "gemm_nvfp4": "gemm_fp8_block",
    "moe": "gemm",
    "moe_fp8": "gemm_fp8",
    "moe_fp8_block": "gemm_fp8_block",
    "moe_nvfp4": "gemm_nvfp4",
    "moe_w4a16": "gemm",
    "attention_einsum": "gemm",
    "copy": "elementwise",
    "activation": "elementwise",
    "rotary": "elementwise",
    "layernorm": "norm",
    "softmax": "norm",
}
#: The kernel class of a GEMM whose weights and activations are both low precision, by the weights' format (a
#: checkpoint's, or a published table's ``gemm_dtype``): fp8 with one scale per tensor or per 128 x 128 block,
#: NVFP4 (fp4 with an FP8 scale per 16).
LOW_PRECISION_GEMM = {"fp8": "gemm_fp8", "fp8_block": "gemm_fp8_block", "nvfp4": "gemm_nvfp4"}
#: The class of a mixture of experts' grouped expert GEMMs (the engine's fused MoE kernel) by the class a dense
#: GEMM of the same weights runs in; a device without a fit of its own prices them as that dense class.
MOE_GEMM = {"gemm": "moe", "gemm_fp8": "moe_fp8", "gemm_fp8_block": "moe_fp8_block", "gemm_nvfp4": "moe_nvfp4"}
#: The class of weight-only 4-bit experts' grouped GEMMs (int4 with group scales; MXFP4 on a device without FP4 math),
#: which run in kernels that dequantize the weights to the activation dtype in their main loop. Fitted on vLLM's
#: Triton W4A16 MoE kernel over int4 weights (the measured one); MXFP4 experts (Marlin's kernel, triton_kernels'
#: matmul_ogs, FlashInfer's on Blackwell) are priced in it as the nearest measured kernel of that kind. A device
#: without a fit of it prices them as its dense bf16 GEMM at 4-bit weight bytes.
W4A16_MOE = "moe_w4a16"
#: The widest weight, in bytes per element with its group scales, priced in :data:`W4A16_MOE` (int4 with a bf16
#: scale per 128: 0.52; MXFP4 with an 8-bit scale per 32: 0.53); 8-bit weight-only experts keep the dense class.
W4A16_MAX_WIDTH = 0.6


def w4a16_small_call(called, top, experts):
    """Whether a weight-only 4-bit MoE call of ``called`` tokens, ``top`` experts each, over ``experts`` experts on
    the device runs vLLM's CUDA kernel instead of its Triton one (``num_valid_tokens / num_experts <= 6``:
    vllm/model_executor/layers/fused_moe/fused_moe.py should_moe_wna16_use_cuda, 4-bit weights in groups of 32-128):
    priced as the dense GEMM of its weights, since the :data:`W4A16_MOE` fits describe the Triton kernel."""
    return np.asarray(called) * top / experts <= 6


#: The math a weight format's GEMMs run at where the device has that peak (otherwise the weights are dequantized).
WEIGHT_MATH = {"fp8": "fp8", "fp8_block": "fp8", "int8": "int8", "nvfp4": "fp4"}
#: Bytes per element a low-precision linear layer's activation quantize kernel writes, scales included: fp8 with one
#: scale per tensor; fp8 with a 4-byte scale per group of 128 (a block-scaled GEMM's 1 x 128 activation groups);
#: NVFP4, 4 bits with an 8-bit scale per 16. It reads the activations at their own width (bf16: 2).
QUANTIZED_WIDTH = {"gemm_fp8": 1.0, "gemm_fp8_block": 1.0 + 4 / 128, "gemm_nvfp4": 0.5 + 1 / 16}
#: Classes that run on the vector units (no matrix peak).
VECTOR_CLASSES = ("norm", "layernorm", "softmax", "elementwise", "activation", "rotary", "copy")
ROW_REDUCTIONS = ("softmax",)
#: Classes priced as (batched) matrix products: projections, and an unfused attention's einsums over the cache.
GEMMS = get_args(GemmClassName)


def efficiency_class(kind: str, name: str) -> str:
    """The efficiency class of a program op from its op class and name (RMSNorms: ``norm_0``, ``final_norm``,
    MLA's ``kv_norm``, an engine's own kernel; LayerNorms: ``layernorm_0``, ``final_layernorm``, torch's
    kernel; the feed-forward activation ``*_act``, an engine's own kernel, as is ``rope``)."""
    if name in ROW_REDUCTIONS:
        return "softmax"
    if name.startswith("layernorm") or name.endswith("_layernorm"):
        return "layernorm"
    if name.startswith("norm") or name.endswith("_norm"):
        return "norm"
    if kind == "elementwise" and name.endswith("_act"):
        return "activation"
    if kind == "elementwise" and name == "rope":
        return "rotary"
    return PROGRAM_CLASS[kind]


@dataclass(frozen=True)
class Times:
    """Parts of an op's predicted time (arrays or floats): fixed cost, compute, memory, work units, total; ``body``,
    compute and memory as the kernel runs them (the longer of the two, or both in turn)."""

    fixed: object
    compute: object
    memory: object
    units: object
    time: object
    body: object = None


def _streamed(nbytes, eff, bandwidth: float, on) -> np.ndarray:
    """Seconds to move ``nbytes`` at the class's achieved-bandwidth curve (the datasheet bandwidth with the
    ``bandwidth`` mechanism off)."""
    if "bandwidth" not in on:
        return nbytes / bandwidth
    with np.errstate(divide="ignore"):
        ramp = np.where(nbytes > 0, (eff.bandwidth_half_bytes / np.maximum(nbytes, 1.0)) ** eff.bandwidth_exponent, 0)
    return nbytes / (bandwidth * eff.bandwidth_ceiling) * (1 + ramp)


def takes_turns(cls: str, eff, kernels: KernelFacts = DEFAULT_KERNELS) -> bool:
    """Whether a class's kernel moves its bytes and does its arithmetic in turn rather than at once: its parameters
    say so (``overlap`` "sum"), or it is a prompt's attention in a synchronous kernel
    (:data:`costmodel.hardware.profile.ATTENTION_KERNEL_KINDS`), whose warps wait for each key and value block before
    multiplying it."""
    return eff.overlap == "sum" or (
        cls == "prefill_attention" and ATTENTION_KERNEL_KINDS.get(kernels.decode_kernel) == "synchronous"
    )


def class_times(
    cls: str,
    eff,
    *,
    peak: float,
    bandwidth: float,
    sms: float,
    timing: str,
    flops,
    nbytes,
    shape: dict,
    on: frozenset | set = frozenset(MECHANISMS),
    overlap: str = "max",
    kernels: KernelFacts = DEFAULT_KERNELS,
) -> Times:
    """Predicted time of ops of class ``cls`` (arrays broadcast): see the module docstring.

    ``shape`` holds what the class's mechanisms need: ``batch, M, K, N`` (gemm); ``b, g, positions``
    and ``h`` (decode attention: positions attended, including the new one; query heads); ``b, h, n, m`` (prefill attention).
    """
    from costmodel.hardware.shapes import fields

    shape = fields(shape)
    flops = np.asarray(flops, float)
    nbytes = np.asarray(nbytes, float)
    split_k = 0.0
    if "causal" in on and shape and "mask_bytes" in shape:
        nbytes = nbytes - shape["mask_bytes"] + shape["broadcast_bytes"]
    if eff.pack_passes and "bandwidth" in on and shape and "width" in shape:
        # a CPU GEMM packs its K x N operand into panels (read, written, read again); GEMV (M = 1) does not
        nbytes = nbytes + eff.pack_passes * (np.asarray(shape["M"]) > 1) * (
            np.asarray(shape["batch"], float) * shape["K"] * shape["N"] * shape["width"]
        )
    fixed = eff.fixed_s.get(timing, 0.0) if "fixed" in on else 0.0
    overlap = "sum" if takes_turns(cls, eff, kernels) else overlap
    rate = peak * (eff.compute_efficiency if "compute" in on else 1.0)
    work = flops
    beyond, longest = 0.0, 0.0  # SM time beyond the matrix products (tile prologues, softmax scores)
    if cls == "prefill_attention" and shape:
        work, beyond, longest = _prefill_work(work, shape, eff, sms, rate, on, kernels)
    compute = np.maximum(work / rate + beyond, longest)
    memory = _streamed(nbytes, eff, bandwidth, on)
    if cls in GEMMS and "tiles" in on and shape:
        compute, split_k = _gemm_choice(cls, shape, eff, sms, rate, memory, overlap, kernels, compute, split_k)
    units = split_k
    if cls == "decode_attention" and "work_units" in on and shape:
        units, memory, fixed = _decode_units(shape, eff, nbytes, memory, fixed, sms, kernels)
    units = units + _second_kernels(cls, shape, eff, bandwidth, on)
    body = np.maximum(compute, memory) if overlap == "max" else compute + memory
    return Times(fixed=fixed, compute=compute, memory=memory, units=units, time=fixed + body + units, body=body)


def _prefill_work(work, shape: dict, eff, sms, rate, on, kernels: KernelFacts):
    """A prompt attention call's (work, SM time beyond its matrix products, the longest tile's time): the score
    pairs its tiles compute under the mask and the window, in whole waves, a group's heads packed in one tile
    where the kernel does, every tile's prologue and epilogue, and the softmax's time per score."""
    beyond, longest = 0.0, 0.0
    B, keys = prefill_tile(kernels, shape.get("k"))  # query rows and key positions of a tile
    n, m = np.asarray(shape["n"], float), np.asarray(shape["m"], float)
    heads = np.asarray(shape["b"], float) * shape["h"]
    per_pair = work / np.maximum(heads * n * m, 1)  # FLOPs of one query-key pair of one head
    pairs = n * m
    if "causal" in on and shape.get("window") is not None:
        pairs = windowed_pairs(n, m, shape["window"], "tiles" in on, B, keys)
    elif "causal" in on:
        pairs = blocked_causal_pairs(n, m, B, keys) if "tiles" in on else causal_pairs(n, m)
    elif "tiles" in on:
        pairs = np.ceil(n / B) * np.ceil(m / keys) * B * keys
    tiles = heads * np.ceil(n / B)
    if (
        eff.pack_gqa
        and np.all(np.asarray(keys) == B)
        and "tiles" in on
        and "causal" in on
        and shape.get("window") is None
        and "g" in shape
    ):
        # the query heads of a group share one tile (rows: positions x heads), B / r positions a tile;
        # tile i of ceil(n r / B) reads ceil((i + 1) / r) key blocks (a prompt: queries from position 0)
        r = np.asarray(shape["h"], float) / np.asarray(shape["g"], float)
        T = np.ceil(n * r / B)
        q, rest = np.floor(T / r), T - np.floor(T / r) * r
        blocks = r * q * (q + 1) / 2 + rest * (q + 1)
        packed = (r > 1) & (n == m)
        pairs = np.where(packed, blocks * B**2 / r, pairs)
        tiles = np.where(packed, np.asarray(shape["b"], float) * shape["g"] * T, tiles)
    work = work * pairs / np.maximum(n * m, 1)
    if "tiles" in on:
        waves = np.ceil(tiles / sms) * sms / np.maximum(tiles, 1)
        work = work * waves
        pairs = pairs * waves
        # one SM computes a query tile alone: the tile with the most key blocks (the last, under a
        # causal mask; at most the window's span) bounds the kernel however many SMs there are
        last = np.ceil(m / keys)  # key blocks of the last query tile
        if "causal" in on and shape.get("window") is not None:
            last = np.minimum(last, np.ceil((np.asarray(shape["window"], float) - 1) / keys) + 1)
        tile_pairs = last * B * keys
        longest = tile_pairs * sms * (per_pair / rate + (eff.score_s if "compute" in on else 0.0)) + eff.tile_s
        # every tile's prologue and epilogue (pipeline fill and drain, its queries loaded and its output
        # stored) is SM time its blocks do not hide, in whole waves
        beyond = eff.tile_s * np.ceil(tiles / sms)
    if "compute" in on:
        beyond = beyond + eff.score_s * heads * pairs
    return work, beyond, longest


def _gemm_choice(cls: str, shape: dict, eff, sms, rate, memory, overlap: str, kernels: KernelFacts, compute, split_k):
    """(compute, split-K reduction time) of a matrix product: the library's fastest configuration, or the one a
    kernel's dispatch fixes (``compute``, ``split_k``: where neither applies)."""
    # the library runs the configuration that finishes first; a split-K product reduces its partial
    # sums in a second kernel (split_s)
    best = None
    for cost, splits in gemm_candidates(
        shape["batch"],
        shape["M"],
        shape["K"],
        shape["N"],
        sms,
        eff.small_tile_exponent,
        eff.tile_k_overhead,
        kernels,
        shape.get("m_blocks"),
    ):
        c, extra = cost / rate, eff.split_s * (splits > 1)
        total = (np.maximum(c, memory) if overlap == "max" else c + memory) + extra
        if best is None:
            best, compute, split_k = total, c, extra
        else:
            faster = total < best
            compute, split_k = np.where(faster, c, compute), np.where(faster, extra, split_k)
            best = np.minimum(best, total)
    # a kernel whose dispatch fixes its tile runs it, unsplit: a single product (gemm_dispatch, a tile scaled
    # against the library's largest like the candidates above), or every expert's product of a grouped kernel
    # (grouped_dispatch, at the class's own rate, its configuration chosen by the tokens of the call, not one
    # expert's rows); any other product keeps the library's choice
    batch = np.asarray(shape["batch"])
    for dispatch, where, scaling, largest, keyed in (
        (kernels.gemm_dispatch.get(cls), batch == 1, eff.small_tile_exponent, kernels.largest_tile, None),
        (kernels.grouped_dispatch.get(cls), batch > 1, 0.0, 1.0, shape.get("tokens")),
    ):
        if dispatch is not None:
            c = (
                dispatched_flops(
                    dispatch.rules,
                    batch,
                    shape["M"],
                    shape["K"],
                    shape["N"],
                    sms,
                    scaling,
                    eff.tile_k_overhead,
                    largest,
                    shape.get("m_blocks"),
                    keyed,
                )
                / rate
            )
            compute, split_k = np.where(where, c, compute), np.where(where, 0.0, split_k)
    return compute, split_k


def _decode_units(shape: dict, eff, nbytes, memory, fixed, sms, kernels: KernelFacts):
    """(work units' SM time and split combines, memory time, fixed cost) of a decode attention call: its
    (sequence, key/value head) work units over the SMs, a split context's combine, a group's packing copies and
    an unsplit context streamed by one SM."""
    count = np.asarray(shape["b"], float) * shape["g"]
    split = np.asarray(shape["positions"]) > kernels.decode_block
    if eff.split_kv == "grouped" and "h" in shape:
        # a group of one query head is not split: one SM streams each work unit's whole context
        unsplit = np.asarray(shape["h"]) == np.asarray(shape["g"])
        split = split & ~unsplit
        # packing the group's queries is a transpose that is a copy in and out once there is more than
        # one sequence and more than one key/value head
        packed = ~unsplit & (np.asarray(shape["b"]) > 1) & (np.asarray(shape["g"]) > 1)
        fixed = fixed + eff.group_copy_s * packed
        if eff.unsplit_sm_bandwidth:
            stream = np.ceil(count / sms) * nbytes / np.maximum(count, 1) / eff.unsplit_sm_bandwidth
            memory = np.where(unsplit, np.maximum(memory, stream), memory)
    combine = eff.split_s
    if eff.combine_split_s and kernels.decode_kernel == "flash_attention_2" and "h" in shape:
        # FlashAttention-2 splits a grouped context as its heuristic says, and its combine kernel reads the
        # splits' partial outputs one after another (one cache round trip each)
        splits = fa2_splits(shape["b"], shape["g"], shape["h"], shape["positions"], sms, kernels.decode_block)
        split, combine = splits > 1, eff.split_s + eff.combine_split_s * splits
    units = eff.unit_sm_s * count / sms + combine * split
    return units, memory, fixed


def _second_kernels(cls: str, shape: dict, eff, bandwidth, on):
    """The time of the kernels a call runs beside its own: a low-precision product's input quantize, a prompt's
    cache write."""
    extra = 0.0
    if cls in QUANTIZED_WIDTH and eff.quantize_input and "quantize" in on and shape and "M" in shape:
        # the activations' quantize kernel: the M x K input read at its width (bf16 unless the shape says) and
        # written in the narrow format, at the class's achieved-bandwidth curve
        elements = np.asarray(shape["batch"], float) * np.asarray(shape["M"], float) * np.asarray(shape["K"], float)
        extra = extra + _streamed(elements * ((shape.get("width") or 2.0) + QUANTIZED_WIDTH[cls]), eff, bandwidth, on)
    if (
        cls == "prefill_attention"
        and "cache_write" in on
        and shape
        and "write_bytes" in shape
        and eff.cache_write_ceiling
    ):
        # a second kernel of the same call: the prompt's keys and values are read and written into the cache
        extra = extra + np.asarray(shape["write_bytes"], float) / (bandwidth * eff.cache_write_ceiling)
    return extra


def ring_all_reduce(nbytes, devices: int, one_way_bandwidth: float, latency: float) -> tuple:
    """(transfer, latency) seconds of a ring all-reduce of ``nbytes`` over ``devices``: 2(t-1)/t of the data
    each way at the link's one-way bandwidth, in 2(t-1) steps of one latency each."""
    t = devices
    return 2 * (t - 1) / t * nbytes / one_way_bandwidth, 2 * (t - 1) * latency


def class_peak(hw, cls: str, dtype: str) -> float:
    """The dense peak a class computes at: the dtype's matrix peak, the vector peak for norms and
    elementwise ops."""
    return hw.vector_peak(dtype) if cls in VECTOR_CLASSES else hw.peak(dtype)


__all__ = [
    "MECHANISMS",
    "TIMINGS",
    "CLASSES",
    "DEFAULT_KERNELS",
    "Times",
    "class_times",
    "class_peak",
    "efficiency_class",
]
