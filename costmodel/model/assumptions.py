"""A whole-model prediction's assumptions in words: the devices, the layout, the kernels and the pricing conventions."""

from __future__ import annotations

from costmodel.attention.roofline import mechanism_lines
from costmodel.hardware.mechanisms import W4A16_MOE
from costmodel.model.engine_ops import reduces_per_layer
from costmodel.model.memory import (
    weight_width,
)
from costmodel.model.presets import ModelPreset
from costmodel.model.pricing import Pricing


def _experts_layout(m: ModelPreset, pr: Pricing) -> str:
    """How the routed experts sit on the tensor-parallel devices, in words."""
    if pr.ep:
        fused = (
            "; vLLM's fused MoE kernel walks every routed row of the batch, writing zeros for those of other "
            "devices' experts"
            if pr.moe_kernel == "fused"
            else ""
        )
        return (
            f"the routed experts spread over the devices (expert parallel: {m.moe.experts // (pr.tp * pr.dp)} "
            f"whole experts each, a token's rows to the devices holding its experts{fused})"
        )
    if pr.ep_size:
        return (
            f"the routed experts in {pr.ep_size} expert-parallel groups of {pr.tp // pr.ep_size} devices "
            f"({m.moe.experts // pr.ep_size} experts each, their width sharded over the group)"
        )
    return "each expert's width sharded"


def gemm_classes(pr: Pricing) -> str:
    """The fitted kernel classes low-precision GEMMs are priced in, in words."""
    if pr.precision.gemm_kernel == "gemm_fp8" and pr.weight_dtype == "fp8_block":
        return (
            "the dense layers' block-scaled GEMMs in the engine's own kernel, a quantize kernel then a CUTLASS "
            "GEMM, priced as the per-tensor FP8 class; the experts' in the block-scaled MoE class"
        )
    return f"the {pr.precision.gemm_kernel} kernel class"


def step_assumptions(m: ModelPreset, pr: Pricing) -> list[str]:
    """The assumptions of a whole-model prediction, one short sentence each: the kernels, the attention, the
    experts, the window, the dtypes and the layout over devices."""
    mla_form = pr.mla_form
    out = [
        "decode step: one token per sequence after `context` cached positions; prefill: a `context`-token prompt",
        *mechanism_lines(pr.hw, pr.model),
        "fused attention" if pr.execution == "fused" else "unfused attention",
    ]
    if pr.engine:
        fused = "q, k and v projections as one GEMM, gate and up as one, the K and V cache writes as one kernel"
        out.append("as serving engines run it: " + fused + (", rotary embeddings on q and k" if m.rope else ""))
    else:
        out.append("every op of the programs as its own kernel (no engine fusion)")
    if m.mla:
        forms = (
            f"the {mla_form} form in decode and prefill"
            if mla_form
            else (
                "absorbed form in decode (attention over the latent cache), naive form in prefill (per-head keys and "
                "values materialised)"
            )
        )
        out.append(
            f"multi-head latent attention: one cached latent of {m.mla.kv_rank} plus a rotary key of "
            f"{m.mla.rope_dim} per position and layer, shared by all heads; {forms}"
        )
    out += _moe_lines(m, pr)
    if m.sliding_window:
        out.append(
            f"{m.local_layers} of {m.layers} layers attend within a sliding window of {m.sliding_window} "
            "positions and cache only those (decode reads at most the window; the prefill kernel skips "
            "key blocks outside it)"
        )
    out.append(_storage_line(m, pr))
    out += _layout_lines(m, pr)
    return out


def _moe_lines(m: ModelPreset, pr: Pricing) -> list[str]:
    """How a mixture of experts routes its tokens and runs its experts' products."""
    out = []
    if m.moe:
        e = m.moe
        routing = (
            "routed uniformly at random (a batch of T tokens touches E(1 - (1 - k/E)^T) distinct experts, "
            "whose weights are read once per step)"
            if e.routing == "uniform"
            else "routed evenly (every expert the same share: a batch of T tokens touches min(E, T k) distinct "
            "experts, whose weights are read once per step)"
            if e.routing == "balanced"
            else f"routed by a power law of exponent {e.routing.split(':')[1]} (expert loads drawn as aiconfigurator's "
            "MoE tables draw them; the busiest device's rows and touched experts, the mean of 64 draws)"
        )
        tiled = (
            "; the experts' products in the tile the device's grouped kernel takes for the tokens of the call "
            "(vLLM's Triton fused MoE configuration, kernels.grouped_dispatch), each expert's rows padded to "
            "whole tiles"
            if pr.precision.experts_class() in pr.hw.architecture.kernels.grouped_dispatch
            else ""
        )
        res = pr.model.resolved if pr.model.active else None  # None: the datasheet roofline, no kernel classes
        if res is not None and pr.precision.experts_class() == W4A16_MOE:
            if res.get(W4A16_MOE) != res.get("gemm"):
                tiled += (
                    "; the weight-only 4-bit experts' products in the moe_w4a16 class where a call carries "
                    "more than 6 routed rows per expert (vLLM's Triton W4A16 kernel as its int4 layers measure "
                    "it, dequantizing each weight in its main loop: the nearest measured kernel to Marlin's and "
                    "matmul_ogs's), at or below that as dense GEMMs of their 4-bit weights (vLLM's kernel "
                    "switch, should_moe_wna16_use_cuda)"
                )
            else:
                tiled += (
                    "; the weight-only 4-bit experts' products as dense bf16 GEMMs of their 4-bit weights (no "
                    "W4A16 MoE kernel measured for this device: on the H100 and B200 that kernel runs prompt-"
                    "sized calls at 8-13% of the bf16 peak, 4.6-6.3x slower)"
                )
        out.append(
            f"mixture of experts in {e.layers} of {m.layers} layers: {e.experts} experts, {e.experts_per_token} "
            f"per token, {routing}; all experts resident in memory"
            + (f"; shared experts of width {e.shared_d_ff}" if e.shared_d_ff else "")
        )
        if tiled:  # how the experts' products run, a sentence of its own
            out.append(tiled.removeprefix("; "))
    return out


def _storage_line(m: ModelPreset, pr: Pricing) -> str:
    """The dtypes: weights (and their groups' scales), the cache, the activations and the math."""
    dtype, weight_dtype, group, gemm_dtype = pr.dtype, pr.weight_dtype, pr.group, pr.gemm_dtype
    width = weight_width(weight_dtype, group)
    scale = {"mxfp4": "an 8-bit power-of-two scale", "nvfp4": "an 8-bit (FP8) scale"}.get(
        weight_dtype, "a 16-bit scale and a zero point"
    )
    experts_only = pr.precision.experts_only
    stored = (
        ("the routed experts' " if experts_only else "")
        + f"projection weights in {weight_dtype}"
        + (f" with {scale} per group of {group} ({width:.3f} bytes each)" if group else "")
        + (f", the other projections in {dtype} (the checkpoint's)" if experts_only else "")
    )
    math_dtype = (
        f"GEMMs over {weight_dtype} weights at the {gemm_dtype} peak ({'W4A4' if gemm_dtype == 'fp4' else 'W8A8'})"
        if gemm_dtype
        else f"math in {dtype}" + (" (weights dequantized in the kernel)" if weight_dtype != dtype else "")
    )
    if gemm_dtype:
        math_dtype += f" ({gemm_classes(pr)})"
    elif pr.precision.expert_dtype:
        math_dtype = (
            f"the experts' GEMMs on MXFP8 activations at the {pr.precision.expert_dtype} peak (the "
            f"engine's own kernels, priced in the dense {pr.precision.moe_kernel} class), other math in "
            f"{dtype}"
        )
    return (
        f"storage: {stored}; embeddings, norms and routers in {dtype}; KV cache in {pr.kv_dtype}; "
        f"activations in {dtype}; {math_dtype}; no framework memory"
    )


def _layout_lines(m: ModelPreset, pr: Pricing) -> list[str]:
    """The devices: tensor parallel and its all-reduces, pipeline stages, attention data parallel groups."""
    out = []
    if pr.tp > 1:
        from costmodel.price.op import collective_curves

        found = collective_curves(pr.hw) if pr.model.active else None
        if pr.hw.crosses(pr.tp) and pr.hw.scale_out_bytes_per_s is not None:
            # across scale-up domains: NCCL's ring paced by the network port (costmodel.price.op._all_reduce)
            domain = pr.hw.domain
            how = (
                f"across {pr.tp // domain} scale-up domains of {domain}: NCCL's ring over all {pr.tp} devices, "
                f"2(t - 1)/t of the buffer at each device's network port "
                f"({pr.hw.scale_out_bytes_per_s.value / 1e9:g} GB/s one way, the ring's slowest hop), the fixed "
                f"latency of the in-domain curve and a ring of the domains"
            )
        elif found:
            how = (
                f"priced by the all-reduce curves fitted on {found[2]}'s published timings"
                + (f" (bus bandwidth x {found[1]:.2f}, the interconnect ratio)" if found[1] != 1 else "")
                + (
                    ": vLLM's own all-reduce as its table measures it at every size (its custom kernel, symmetric "
                    "memory or NCCL, as vLLM picks)"
                    if pr.all_reduce == "engine"
                    else ": vLLM's custom all-reduce up to 8 MiB, NCCL above"
                )
            )
        else:
            how = "each a ring over the datasheet interconnect"
        if pr.hw.group_share(pr.tp) < 1 and not pr.hw.crosses(pr.tp):
            how += (
                f", over {pr.tp - 1} of each device's {pr.hw.domain - 1} links (a point-to-point mesh: "
                f"x {pr.hw.group_share(pr.tp):.2f} of the interconnect bandwidth)"
            )
        reduces = (
            "one all-reduce per layer (parallel block)" if reduces_per_layer(m) == 1 else "two all-reduces per layer"
        ) + f", {how}"
        out.append(
            f"tensor parallel over {pr.tp} device(s): query heads, FFN and vocabulary sharded; key/value heads "
            "sharded when t <= g, replicated when g < t"
            + ("; the MLA latent replicated" if m.mla else "")
            + (f"; {_experts_layout(m, pr)}" if m.moe else "")
            + f"; {reduces}"
        )
    elif pr.dp == 1:
        out.append("one device")
    if pr.pp > 1:
        out.append(
            f"pipeline parallel over {pr.pp} stages of {pr.tp} device(s), each a contiguous 1/{pr.pp} of the "
            "layers with their weights and KV cache; a stage sends its tokens' hidden states to the next (over "
            "the network where stages sit in different scale-up domains)"
        )
    if pr.dp > 1:
        held = (
            f"the routed experts spread over all {pr.dp * pr.tp} devices ({m.moe.experts // (pr.dp * pr.tp)} "
            "whole experts each)"
            if pr.ep
            else f"every routed expert's width sharded over all {pr.dp * pr.tp} devices (1/{pr.dp * pr.tp} of each: "
            "no expert parallel, as vLLM's data parallel without --enable-expert-parallel runs them)"
        )
        out.append(
            f"attention data parallel: {pr.dp} groups of {pr.tp} device(s), each with its own requests and "
            f"KV cache; {held}, which see every group's tokens (the groups step together, each with the "
            "same load): per expert layer an all-gather of the groups' hidden states and a reduce-scatter "
            "of the experts' output over the device's peers in the other groups"
        )
    return out
