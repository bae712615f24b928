"""What a device's kernels do, one record per kernel kind: GEMM dispatch rules and tiles, the decode and prefill attention kernels' launches, tiles and per-score work (:class:`KernelFacts`)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from costmodel.hardware.units import (
    Confidence,
    Count,
    Strict,
)


class Tile(Strict):
    """Shape of the matrix unit's native tile (e.g. TPU MXU 128 x 128, NVIDIA mma m16n8k16)."""

    shape: tuple[Count, ...] = Field(min_length=2, max_length=3)
    source: str
    confidence: Confidence


#: Op classes of the fitted prediction model (see :data:`costmodel.hardware.mechanisms.EFFICIENCY_CLASS`).
#: In this order, a parent class before the classes that fall back to it (costmodel.hardware.mechanisms.FALLBACK).
EfficiencyClassName = Literal[
    "gemm",
    "gemm_fp8",
    "gemm_fp8_block",
    "gemm_nvfp4",
    "moe",
    "moe_fp8",
    "moe_fp8_block",
    "moe_nvfp4",
    "moe_w4a16",
    "attention_einsum",
    "decode_attention",
    "prefill_attention",
    "norm",
    "layernorm",
    "softmax",
    "elementwise",
    "activation",
    "rotary",
    "copy",
]


#: The classes priced as matrix products (tiles, waves, split-K): the only ones a GEMM dispatch can name. ``moe*``:
#: a mixture of experts' grouped expert GEMMs, in the engine's fused MoE kernel, per weight format (``moe_w4a16``:
#: weight-only 4-bit experts, dequantized to the activation dtype in the kernel's main loop).
GemmClassName = Literal[
    "gemm",
    "gemm_fp8",
    "gemm_fp8_block",
    "gemm_nvfp4",
    "moe",
    "moe_fp8",
    "moe_fp8_block",
    "moe_nvfp4",
    "moe_w4a16",
    "attention_einsum",
]


class TileRule(Strict):
    """One branch of a library's fixed GEMM dispatch: the tile (rows of M, columns of N) it runs for problems
    with M in [m_min, m_max], N <= n_max and K <= k_max (a bound left out does not apply). In a grouped kernel's
    dispatch (``KernelFacts.grouped_dispatch``) M is the tokens the layer's kernel is called on, which the engine
    chooses its configuration by, not one expert's rows."""

    tile: tuple[Count, Count]
    #: SMs one tile runs on: 2 for a tile of a pair of SMs (an SM100 2-SM MMA, ``tcgen05.mma.cta_group::2``: each SM
    #: computes half the tile's rows, the operands multicast to both)
    sms: int = Field(1, ge=1, le=2)
    #: tiles along M and along N of one thread-block cluster: a persistent CUTLASS kernel launches whole clusters,
    #: so its grid of tiles is rounded up to whole clusters along each side (the rounded tiles run, out of bounds)
    cluster: tuple[Count, Count] = (1, 1)
    m_min: Count | None = None
    m_max: Count | None = None
    n_max: Count | None = None
    k_max: Count | None = None


class GemmDispatch(Strict):
    """A GEMM kernel whose tile is fixed by the problem's shape (the first rule that matches), run in waves of
    persistent tiles without split-K, instead of the cheapest of a library's tiles."""

    rules: tuple[TileRule, ...] = Field(min_length=1)
    source: str

    @model_validator(mode="after")
    def _last_rule_takes_the_rest(self):
        last = self.rules[-1]
        if any(v is not None for v in (last.m_min, last.m_max, last.n_max, last.k_max)):
            raise ValueError("the last rule of a GEMM dispatch must have no bounds (it takes every other shape)")
        return self


def _rules(*rules) -> tuple[TileRule, ...]:
    return tuple(TileRule(**r) for r in rules)


#: GEMM dispatches engines' kernels are known to follow, by the name a profile gives them
#: (``kernels.gemm_dispatch: {gemm_fp8: vllm_sm90_fp8}``); a profile may give rules of its own instead.
GEMM_DISPATCHES = {
    "vllm_sm90_fp8": GemmDispatch(
        rules=_rules(
            {"m_max": 16, "n_max": 1280, "tile": (16, 64), "cluster": (2, 1)},
            {"m_max": 16, "tile": (16, 64)},
            {"m_max": 64, "n_max": 1280, "tile": (16, 64), "cluster": (4, 1)},
            {"m_max": 64, "tile": (64, 64)},
            {"m_max": 128, "tile": (64, 128), "cluster": (2, 1)},
            {"tile": (128, 128), "cluster": (2, 1)},
        ),
        source="vLLM cutlass_scaled_mm on SM90 (vllm-project/vllm csrc/quantization/w8a8/cutlass/c3x/"
        "scaled_mm_sm90_fp8_dispatch.cuh @68f442e): M <= 16 a 64 x 16 tile with A and B swapped (16 rows of "
        "M, 64 columns of N), cluster 1 x 2 of the swapped problem (2 tiles along M) for N <= 1280, 1 x 1 "
        "above; M <= 64 the same tile, cluster 1 x 4 (4 along M) for N <= 1280, else 64 x 64 swapped, "
        "cluster 1 x 1; M <= 128 64 x 128, cluster 2 x 1; larger M 128 x 128, cluster 2 x 1; persistent "
        "(CUTLASS's tile scheduler rounds the grid of tiles up to whole clusters), no split-K",
    ),
    "vllm_sm100_fp8": GemmDispatch(
        rules=_rules(
            {"m_max": 16, "tile": (32, 128), "sms": 2, "cluster": (1, 2)},
            {"m_min": 64, "m_max": 64, "k_max": 4095, "tile": (64, 64)},
            {"m_max": 64, "tile": (64, 128), "sms": 2, "cluster": (1, 2)},
            {"m_max": 256, "tile": (128, 128), "sms": 2},
            {"tile": (256, 128), "sms": 2, "cluster": (1, 2)},
        ),
        source="vLLM cutlass_scaled_mm on the SM100 family, SM 10.x (vllm-project/vllm csrc/quantization/w8a8/"
        "cutlass/c3x/scaled_mm_sm100_fp8_dispatch.cuh @487e7b0): M <= 16 a 128 x 32 tile with A and B "
        "swapped (32 rows of M, 128 columns of N), cluster 4 x 1; M <= 64 128 x 64 swapped (64 rows, 128 "
        "columns), cluster 4 x 1, except M = 64 with K < 4096, 64 x 64 unswapped, cluster 1 x 1; M <= 256 "
        "128 x 128, cluster 2 x 1; larger M 256 x 128, cluster 2 x 2; persistent, no split-K. Each with "
        "KernelScheduleAuto, which runs a tile on a pair of SMs (2-SM MMA) when the cluster's M is even and "
        "the tile's M a multiple of 128 (NVIDIA/cutlass include/cutlass/gemm/collective/builders/"
        "sm100_common.inl, sm100_make_trivial_tiled_mma): every configuration but the 64 x 64 one. A cluster "
        "holds one pair along M (the 2-SM tile) and, for the 4 x 1 swapped and 2 x 2 clusters, two tiles "
        "along N: the grid of tiles is rounded up to an even count along N",
    ),
    "vllm_fused_moe_block_fp8": GemmDispatch(
        rules=_rules({"m_max": 64, "tile": (16, 128)}, {"tile": (64, 128)}),
        source="vLLM's Triton fused_moe kernel for block-scaled FP8 experts without a tuned configuration, vLLM "
        "0.17 and later (vllm/model_executor/layers/fused_moe/fused_moe.py get_default_config as vllm-project/"
        "vllm PR 34846, merged 2026-02-18, left it; dtype fp8_w8a8 with a block_shape): BLOCK_SIZE_M 16 for a "
        "call of at most 64 tokens, else 64; BLOCK_SIZE_N block_shape[0] = 128, BLOCK_SIZE_K block_shape[1] = "
        "128, SPLIT_K 1; each expert's rows padded to whole blocks of BLOCK_SIZE_M rows "
        "(moe_align_block_size). Before that PR BLOCK_SIZE_M was 64 whatever the token count. A tuned file in "
        "fused_moe/configs/ (E=..,N=..,device_name=..,dtype=fp8_w8a8,block_shape=[128,128].json) replaces "
        "it; for NVIDIA_B200 the folder holds such files only for E=16, N=4096 and E=128, N=384",
    ),
    "aiter_fused_moe_block_fp8": GemmDispatch(
        rules=_rules({"m_max": 31, "tile": (16, 128)}, {"tile": (32, 128)}),
        source="AMD's AITER fused MoE for block-scaled FP8 experts without a tuned configuration, as SGLang "
        "(SGLANG_USE_AITER), ATOM and vLLM (VLLM_ROCM_USE_AITER) run it on CDNA3 and CDNA4 (ROCm/aiter "
        "aiter/fused_moe.py get_2stage_cfgs, as mirrored at yuguo68/aiter@195d3d1): a call of more than 31 tokens "
        "whose intermediate size is a multiple of 256 (DeepSeek-V3/R1's 2048 split over up to 8 devices) runs the "
        "one-stage assembly kernel fmoe_fp8_blockscale_g1u1 on blocks of BLOCK_SIZE_M = 32 rows, a smaller call the "
        "two-stage CK kernels on blocks of 16; 128 columns of N a block (the 128 x 128 weight scales, "
        "fc_scale_blkn; tileN 128); each expert's rows padded to whole blocks (moe_sorting). A tuned row of "
        "aiter/configs/tuned_fmoe.csv replaces it",
    ),
    "vllm_fused_moe": GemmDispatch(
        rules=_rules(
            {"m_max": 32, "tile": (16, 64)},
            {"m_max": 64, "tile": (32, 64)},
            {"m_max": 96, "tile": (32, 128)},
            {"m_max": 512, "tile": (64, 128)},
            {"tile": (128, 128)},
        ),
        source="vLLM's Triton fused_moe kernel for bf16 and per-tensor FP8 experts without a tuned configuration, "
        "vLLM 0.17 and later (vllm/model_executor/layers/fused_moe/fused_moe.py get_default_config as "
        "vllm-project/vllm PR 34846, merged 2026-02-18, left it): BLOCK_SIZE_M 16 for a call of at most 32 "
        "tokens, 32 up to 96, 64 up to 512, 128 above; BLOCK_SIZE_N 64 up to 64 tokens, else 128; SPLIT_K 1; "
        "each expert's rows padded to whole blocks of BLOCK_SIZE_M rows (moe_align_block_size). A tuned file "
        "in fused_moe/configs/ (E=..,N=..,device_name=..[,dtype=fp8_w8a8].json) replaces it; for NVIDIA_B200 "
        "the folder holds bf16 files for E=128 with N=1024, 1856, 192 and 384 and fp8 ones for E=128 with "
        "N=1024 and 2048",
    ),
}


#: The decode attention kernel vLLM runs on an architecture, and when it splits a context over SMs (as each
#: device's fit found it: FlashAttention-2 on the A100, grouped; FlashAttention-3 on the H100 and FlashInfer on the
#: B200, always). Which kernel: vllm-project/vllm vllm/platforms/cuda.py ``_get_backend_priorities`` (compute
#: capability 10.x, the data-center Blackwell parts, puts FLASHINFER first, every other NVIDIA GPU FLASH_ATTN) and
#: vllm/v1/attention/backends/fa_utils.py ``get_flash_attn_version`` (FlashAttention-3 on SM90, else 2).
DECODE_KERNELS = {"flash_attention_2": "grouped", "flash_attention_3": "always", "flashinfer": "always"}


DecodeKernel = Literal["flash_attention_2", "flash_attention_3", "flashinfer"]


#: Kernels a decode attention call launches beside its own, where a device whose fit never saw that kernel needs
#: them counted (:func:`costmodel.price.origin.carried`): ``combine``, the kernel that combines a split
#: context's partial results; ``copies``, those that pack a grouped query's heads and unpack its output.
#: FlashAttention-2 as vLLM builds it (vllm-project/flash-attention csrc/flash_attn/flash_api.cpp ``mha_varlen_fwd``
#: @04325b6): a decode call with more query than key/value heads swaps the group's heads into the query rows,
#: ``q.reshape({b, g, h/g, d}).transpose(1, 2).reshape({b * h/g, g, d})``, a copy where the batch and the key/value
#: heads are both above one; the kernel then writes a temporary output of that layout (``out =
#: torch::empty_like(q_padded)``, since vLLM passes ``out_``) and copies it back into the caller's, transposed
#: (``out_.value().view({b, g, h/g, d}).copy_(out)``): a second copy, counted here where the first is. A call
#: that copies no query in copies its output out too, but the A100's tables show no cost for it: counted on every
#: grouped call, the A100's refitted decode fit goes from 5.8% to 13.0% median error. Only a swapped call has
#: ``set_params_splitkv`` split its context, and ``run_mha_fwd_splitkv_dispatch`` launches
#: ``flash_fwd_splitkv_combine_kernel`` after the split kernel. The other kernels' combine costs are their own fits'.
DECODE_LAUNCHES = {"flash_attention_2": {"combine": 1, "copies": 2}}


#: How each of those kernels (the same library runs a prompt's attention: FlashAttention's forward, FlashInfer's
#: prefill) schedules a tile's online softmax against its matrix products. ``synchronous``: each warp computes its
#: scores, then their exponentials and rescaling, then the next product (FlashAttention-2, Dao 2023, section 3.1).
#: ``warp_specialized``: producer, matrix-product and softmax work run in separate warps (warpgroups) so that one
#: tile's exponentials run under another's products (FlashAttention-3, Shah et al. 2024, sections 3.1-3.2, ping-pong
#: scheduling on SM90; FlashInfer's SM100 kernels, TensorRT-LLM's and CUTLASS's Blackwell FMHA, separate softmax and
#: MMA warps over tensor memory). A synchronous kernel's warps also wait for each key and value block before
#: multiplying it, so its prompt's memory traffic and arithmetic add up (:func:`costmodel.hardware.mechanisms.takes_turns`)
#: where a warp-specialized kernel's producer warps load under the products. The fits agree on the softmax: a score
#: costs 0.04-0.05 SM-cycles on the H100 and B200 (score_s x SMs x clock of each device's prefill fit), against the
#: 0.133 FlashAttention-2's instructions take on the A100 (:data:`SOFTMAX_WORK`), which the A100's table (one head
#: dimension) fits as well as its own fit's 0.06.
ATTENTION_KERNEL_KINDS = {
    "flash_attention_2": "synchronous",
    "flash_attention_3": "warp_specialized",
    "flashinfer": "warp_specialized",
}


#: Whether a kernel's prompt call puts the query heads of a key/value group into the rows of one tile (the
#: ``pack_gqa`` of a prefill fit), where its source says. FlashAttention-3 as vLLM calls it (a paged cache,
#: variable-length queries) packs them: Dao-AILab/flash-attention hopper/flash_api.cpp ``get_pack_gqa`` ("Always
#: enable PackGQA for Sm8x or PagedKVNonTMA or Split"), the H100's fit agreeing (its p90 error 20.7% packed,
#: 41.2% with packing switched off and nothing refitted). FlashAttention-2's forward launches one CTA per query
#: block of each query head (grid query blocks x batch x heads: vllm-project/flash-attention
#: csrc/flash_attn/src/flash_fwd_launch_template.h ``run_flash_fwd``, ``run_flash_splitkv_fwd``) and puts a group
#: into the rows only for a decode call (above).
#: FlashInfer as vLLM calls it on SM 10.x runs a prompt in TensorRT-LLM's generated ("trtllm-gen") context kernels:
#: vllm/utils/flashinfer.py ``use_trtllm_attention`` picks them for every prefill whose KV cache is in the model's
#: dtype ("Using TRTLLM prefill attention (auto-detected)"), and their kernels, named for their tiling
#: (``fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKvCausalP64VarSeqQ128Kv128PersistentContext``), group no heads
#: (only the generation kernels carry ``GroupsHeadsQ``: ``Grouped`` in their names); their runner gives a CTA one
#: query head unless the kernel groups them (TensorRT-LLM trtllmGenKernels/fmha/fmhaKernels.h ``computeNumCtas``:
#: ``numHeadsPerCta = mGroupsHeadsQ ? ... : 1``). The B200's fit agrees: it chose no packing.
PREFILL_PACKS_GQA = {"flash_attention_2": False, "flash_attention_3": True, "flashinfer": False}


#: Query rows and key positions of a prompt kernel's tile, where its source says and they differ from the profile's
#: square ``prefill_block``: per kernel, the query rows and the key positions by head dimension (the largest head
#: dimension each key block serves, in order). FlashAttention-2 as vLLM calls it (a paged cache) runs its split-KV
#: forward for every prompt (vllm-project/flash-attention csrc/flash_attn/flash_api.cpp ``mha_varlen_fwd`` passes
#: ``force_split_kernel`` when a block table is given; csrc/flash_attn/src/flash_fwd_launch_template.h
#: ``run_mha_fwd_splitkv_dispatch``: ``kBlockM = 64`` for every head dimension, ``kBlockN`` 256 up to head dimension
#: 64, 128 up to 128, else 64).
PREFILL_TILES = {"flash_attention_2": (64, ((64, 256), (128, 128), (None, 64)))}


def prefill_tile(kernels, head_dim=None) -> tuple[int, int]:
    """(query rows, key positions) of a tile of the prompt kernel ``kernels`` name (:data:`PREFILL_TILES`), at head
    dimension ``head_dim`` (None: 128, the published tables' and most served models'; an array gives an array of key
    positions); square ``prefill_block`` tiles for any other kernel."""
    tile = PREFILL_TILES.get(kernels.decode_kernel)
    if tile is None:
        return kernels.prefill_block, kernels.prefill_block
    rows, keys = tile
    d = np.asarray(128 if head_dim is None else head_dim, float)
    out = np.full(d.shape, float(keys[-1][1]))
    for top, k in reversed(keys[:-1]):
        out = np.where(d <= top, float(k), out)
    return rows, (int(out) if out.ndim == 0 else out)


#: Prompt-kernel CTAs one SM runs at once, where its source says. FlashAttention-2 at head dimension 128 on SM80
#: runs 128 x 64 tiles of 4 warps (flash_fwd_launch_template.h ``run_mha_fwd_hdim128``; ``run_mha_fwd_splitkv_dispatch``
#: 64 x 128 with a paged cache): 64-80 KB of shared memory for the query tile and one key and one value block, two
#: CTAs in an SM's 164 KB, so one CTA's start (its query tile loaded, the first key block waited for) and end (its
#: output stored) run beside the other's main loop. FlashAttention-3's variable-length forward is persistent, one CTA
#: per SM taking tile after tile (hopper/tile_scheduler.hpp ``VarlenDynamicPersistentTileScheduler``), so each
#: tile's pipeline fill and drain is its SM's own time: the H100 fit's ``tile_s``, 3.6 us. TensorRT-LLM's context
#: kernels that FlashInfer runs on SM 10.x (above) are persistent too (``...Q128Kv128PersistentContext``).
PREFILL_CTAS_PER_SM = {"flash_attention_2": 2, "flash_attention_3": 1, "flashinfer": 1}


#: The online softmax's own instructions per attention score in a synchronous kernel, which run on the SM's FP32 and
#: special-function units between its matrix products (:func:`costmodel.price.origin.carried` prices them where a fit of
#: a warp-specialized kernel, whose matrix products hide them, is all there is). FlashAttention-2
#: (Dao-AILab/flash-attention csrc/flash_attn/src/softmax.h and flash_fwd_launch_template.h): per score one FFMA
#: (``exp2f(x * scale - max_scaled)``, scaled and shifted at once), the exponential itself (``exp2f``, one
#: special-function instruction under fast math), one max and one add (``reduce_max``, ``reduce_sum``), half a
#: conversion (``convert_type``: two scores per bf16x2), and the output's rescale, head dimension / kBlockN
#: multiplies per score (``softmax_rescale_o``; at head dimension 128, the published tables' and most served
#: models', vLLM's split-KV tiles of 128 keys, :data:`PREFILL_TILES`: 1). ``fp32``: FP32-pipe instructions, ``sfu``:
#: special-function ones.
SOFTMAX_WORK = {"flash_attention_2": {"fp32": 4.5, "sfu": 1.0}}


#: Special-function results per SM per clock on NVIDIA GPUs (exp2, log2, reciprocal, rsqrt, sin, cos): 16 (CUDA C++
#: Programming Guide, "Arithmetic Instructions", the throughput of native arithmetic instructions per multiprocessor;
#: the FlashAttention-3 paper's "3.9 TFLOPS of special functions" on the H100 SXM5, Shah et al. 2024 section 3, is 16
#: per SM per clock over its 132 SMs at 1.83 GHz); Blackwell Ultra (B300, GB300) doubles it (its profiles say so:
#: ``architecture.sfu_per_sm_clock``). A device's FP32 lanes per SM come from its FP32 peak (an FMA is two FLOPs),
#: as the power of two nearest it: a datasheet's FP32 peak is often quoted at another clock than its boost clock (the
#: B300's 75 TFLOP/s over 148 SMs at 2.032 GHz is 125 lanes), and an SM's lanes are 64 (A100) or 128 (Ampere's GA10x,
#: Ada, Hopper, Blackwell).
SFU_PER_SM_CLOCK = 16


class KernelFacts(Strict):
    """Facts of the kernels a device's libraries run, which the mechanisms count in (:mod:`costmodel.hardware.mechanisms`):
    the output tiles a GEMM library chooses from, the shortest reduction a split-K GEMM gives one tile, the
    key/value positions per block of the split-KV decode kernel and the query rows per tile of the prefill
    kernel. The defaults are those of the libraries vLLM runs on NVIDIA Ampere and later (``source``); a profile
    whose libraries differ states its own."""

    gemm_tiles: tuple[tuple[Count, Count], ...] = Field(
        ((64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128)), min_length=1
    )
    split_k_min: Count = 256
    #: efficiency classes whose kernel dispatches its tile by shape (e.g. vLLM's CUTLASS fp8 GEMM): rules, or the
    #: name of one of :data:`GEMM_DISPATCHES`
    gemm_dispatch: dict[GemmClassName, GemmDispatch] = Field(default_factory=dict)
    #: classes whose grouped kernel (a mixture of experts' expert GEMMs, one product per expert) runs a fixed
    #: tile instead of the library's cheapest: rules, or the name of one of :data:`GEMM_DISPATCHES`
    grouped_dispatch: dict[GemmClassName, GemmDispatch] = Field(default_factory=dict)
    decode_block: Count = 128
    prefill_block: Count = 128
    #: the decode attention kernel vLLM runs here (:data:`DECODE_KERNELS`); None: as the device it borrows from
    decode_kernel: DecodeKernel | None = None
    source: str = (
        "CUTLASS 3 / cuBLAS GEMM threadblock tiles for SM80 and later (64 to 256 rows and columns; "
        "split-K slices of at least 256); FlashAttention-2 split-KV decode blocks of 128 positions and "
        "forward tiles of 128 query rows (head dimension <= 128)"
    )

    @field_validator("gemm_dispatch", "grouped_dispatch", mode="before")
    @classmethod
    def _named_dispatches(cls, value):
        if not isinstance(value, dict):
            return value
        named = {k: v for k, v in value.items() if isinstance(v, str)}
        unknown = sorted(set(named.values()) - set(GEMM_DISPATCHES))
        if unknown:
            raise ValueError(f"unknown GEMM dispatch {unknown[0]!r}; known: {', '.join(GEMM_DISPATCHES)}")
        return value | {k: GEMM_DISPATCHES[v] for k, v in named.items()}

    @property
    def largest_tile(self) -> int:
        return max(a * b for a, b in self.gemm_tiles)
