"""What a model keeps in memory: parameters by kind and the KV cache, read off the resident tensors of the same
ops the step prices (:mod:`costmodel.model.ops`), so the cost and the memory of a model cannot disagree; the
storage width of quantised weights; the largest batch and context that fit.
"""

from __future__ import annotations

from costmodel.core.fits import largest_count
from costmodel.core.vocab import choice
from costmodel.counts.compiled import compile_block, compile_program
from costmodel.model.ops import NORM_PARAMS, compiled_block, local_context, moe_dims, shape_dims
from costmodel.model.presets import ModelPreset


def _attention_blocks(m: ModelPreset) -> list[tuple[int, int]]:
    """(layers, key/value heads) of every attention block: decoder self-attention, cross-attention and
    encoder self-attention."""
    blocks = [(m.layers, m.kv_heads)]
    if m.architecture == "encoder-decoder":
        blocks += [(m.layers, m.cross_kv), (m.encoder_layers, m.enc_kv)]
    return blocks


def _weights(m: ModelPreset, block, dims: dict) -> list[tuple[str, float, float]]:
    """Per op of a compiled block at ``dims``: its kind, its ``P_*`` (projection) parameters, and its ``W_*``
    parameters (a norm's times NORM_PARAMS: LayerNorm has a shift). Biases are the block's, apart."""
    out = []
    stored, params = block.storage(dims)[0], block.params(dims)
    for kind, p_, all_ in zip(block.kinds, stored, params):
        other = (all_ - p_) * (NORM_PARAMS[m.norm] if kind == "elementwise" else 1)
        out.append((kind, p_, other))
    return out


def param_groups(m: ModelPreset) -> dict[str, int]:
    """The model's parameters by kind: ``projections`` (attention, feed-forward and expert weights of the
    layers, what a quantized checkpoint stores in few bits), ``embeddings`` (input table and untied output
    projection), and ``other`` (norms, biases, routers). Each is a resident weight of the programs the step
    prices: the attention program's, and those of the blocks around it (:mod:`costmodel.counts.step_program`) at
    one token, every expert resident."""
    attention, _ = compiled_block(m, "incremental", "unfused", "inplace", None)
    proj = other = 0
    for layers, g in _attention_blocks(m):
        dims = shape_dims(m, g)
        w = attention.resident(dims)[0]
        norms = (m.mla.kv_rank + (m.mla.q_rank or 0)) if m.mla else 0  # the latents' RMSNorm weights
        proj += layers * (w - norms)
        other += layers * (norms + (attention.bias_elements(dims) if m.bias else 0))
    dense = m.layers - (m.moe.layers if m.moe else 0)
    dims = {"t": 1, "d": m.d_model, "f": m.d_ff}
    layer = compile_block("layer", m.norm, m.norms_per_layer, m.ffn_gated)
    for kind, p_, w in _weights(m, layer, dims):
        # the norms of every layer; the feed-forward projections (and their biases) of the dense layers
        proj, other = (proj + dense * p_, other) if kind == "projection" else (proj, other + m.layers * w)
    if m.bias:
        other += dense * layer.bias_elements(dims)
    if m.moe:  # the router's and the shared experts' gate's weights are other parameters
        moe = m.moe
        for block, at in (
            _routed_block(m),
            (
                compile_block("ffn", m.ffn_gated, "shared", bool(moe.shared_gate)),
                {"t": 1, "d": m.d_model, "f": moe.shared_d_ff},
            ),
        ):
            for _, p_, w in _weights(m, block, at):
                proj, other = proj + moe.layers * p_, other + moe.layers * w
        other += moe.layers * moe.routed_experts * moe.router_bias
    if m.architecture == "encoder-decoder":  # its layers' weights, norms and biases; its final norm
        enc = compile_block("layer", m.norm, 2, m.ffn_gated)
        proj += m.encoder_layers * (
            sum(p_ + w for _, p_, w in _weights(m, enc, dims)) + (enc.bias_elements(dims) if m.bias else 0)
        )
        other += m.d_model * NORM_PARAMS[m.norm]
    head = compile_block("head", m.norm)
    # the final norm's weights (the output projection is an embedding, counted below)
    other += sum(w for _, _, w in _weights(m, head, {"t": 1, "o": 1, "d": m.d_model, "w": 0}))
    embeddings = m.vocab * m.d_model * (1 if m.tied_embeddings else 2) + m.learned_positions * m.d_model
    return {"projections": int(proj), "embeddings": int(embeddings), "other": int(other)}


def routed_expert_params(m: ModelPreset) -> int:
    """The routed experts' projection weights (a part of :func:`param_groups`' ``projections``): what a checkpoint
    that quantizes only its experts (gpt-oss's MXFP4) stores in few bits."""
    if m.moe is None:
        return 0
    return int(m.moe.layers * sum(p_ for _, p_, _ in _weights(m, *_routed_block(m))))


def _routed_block(m: ModelPreset) -> tuple:
    """The routed experts' block of one layer and its dimensions at one token, every expert resident."""
    return compile_block("moe", m.ffn_gated), {**moe_dims(m, 1), "u": m.moe.experts}


def param_count(m: ModelPreset) -> int:
    """Every parameter of the model (:func:`param_groups` summed)."""
    return sum(param_groups(m).values())


def model_facts(m: ModelPreset) -> dict:
    """What the model lists print beside a preset's shape: parameters (total, by kind, active per token) and
    KV-cache bytes per token in bf16, from the programs."""
    groups = param_groups(m)
    kv = (kv_cache_elements(m, 1, 1, 1) - kv_cache_elements(m, 1, 0, 1)) * 2
    return {
        "params": sum(groups.values()),
        "groups": groups,
        "active_params": active_params(m),
        "kv_bytes_per_token_bf16": kv,
    }


def active_params(m: ModelPreset) -> int:
    """Parameters one token's forward pass uses: all but the routed experts it does not pick."""
    if not m.moe:
        return param_count(m)
    moe, up = m.moe, 2 if m.ffn_gated else 1
    unused = moe.layers * (moe.experts - moe.experts_per_token) * (up + 1) * m.d_model * moe.expert_d_ff
    return param_count(m) - unused


def kv_cache_elements(m: ModelPreset, batch: int, context: int, source: int) -> int:
    """K and V of every sequence after a decode step at ``context`` (context + 1 positions; a local layer
    keeps the last ``sliding_window``), and the cross-attention K and V of the ``source`` positions: the
    programs' resident cache tensors."""
    compiled, _ = compiled_block(m, "incremental", "unfused", "inplace", None)
    g, local = m.kv_heads, m.local_layers
    total = (m.layers - local) * compiled.resident(shape_dims(m, g, b=batch, ctx=context))[1]
    if local:
        total += local * compiled.resident(shape_dims(m, g, b=batch, ctx=local_context(m, context)))[1]
    if m.architecture == "encoder-decoder":
        total += (
            m.layers * compile_program("gqa", "batched").resident(shape_dims(m, m.cross_kv, b=batch, ctx=source))[1]
        )
    return int(total)


#: Bits per stored element of each weight dtype (the elements; group scales are added by group size).


WEIGHT_BITS = {
    "fp32": 32,
    "bf16": 16,
    "fp16": 16,
    "fp8": 8,
    "fp8_block": 8,
    "int8": 8,
    "int4": 4,
    "mxfp4": 4,
    "nvfp4": 4,
}

#: Bits a scale group stores besides its weights: a 16-bit scale and a zero point of the weights' width
#: (AWQ's and GPTQ's layouts).
#: MXFP4 (OCP microscaling): one 8-bit power-of-two scale per group; NVFP4: one FP8 (E4M3) scale per group (its
#: one FP32 scale per tensor is left out, as per-tensor scales are).
GROUP_BITS = {"int4": 16 + 4, "int8": 16 + 8, "mxfp4": 8, "nvfp4": 8}


def weight_width(dtype: str, group_size: int = 0) -> float:
    """Bytes per projection weight: the dtype's bits, plus a group's scale and zero point shared by
    ``group_size`` weights (int4 with groups of 128: 0.5 + 2.5/128 = 0.520 bytes). Per-channel and
    per-tensor scales (group size 0) are left out: one per row or tensor, under 0.1% of the bytes."""
    dtype = choice("weight dtype", dtype, WEIGHT_BITS)
    extra = GROUP_BITS.get(dtype, 0) / group_size if group_size else 0
    return (WEIGHT_BITS[dtype] + extra) / 8


def weight_bytes(dev: ModelPreset, pr) -> int:
    """Bytes of the weights one device holds: projections in the weight storage (where the checkpoint stores only the
    routed experts so, the other projections at their own width), the rest in the activation dtype."""
    groups, precision = param_groups(dev), pr.precision
    stored = groups["projections"] * precision.weight
    if precision.experts_only:
        routed = routed_expert_params(dev)
        stored = routed * precision.weight + (groups["projections"] - routed) * precision.dense_weight
    return int(stored + (groups["embeddings"] + groups["other"]) * precision.act)


def kv_bytes(dev: ModelPreset, pr, batch: int, context: int, source: int) -> int:
    """Bytes of the KV cache one device holds after a decode step at ``context``."""
    return int(kv_cache_elements(dev, batch, context, source) * pr.precision.kv)


def largest_batch_in_memory(dev: ModelPreset, pr, context: int, source: int) -> int:
    """The largest batch whose weights and KV cache after a step at ``context`` fit one device (the cache is
    linear in the batch)."""
    return largest_count(pr.hw.capacity - weight_bytes(dev, pr), kv_bytes(dev, pr, 1, context, source))


#: Group size assumed for int4 and int8 weights asked for on the command line (AWQ's and GPTQ's default).


DEFAULT_GROUP = {"int4": 128, "int8": 128, "mxfp4": 32, "nvfp4": 16}  # MXFP4: blocks of 32; NVFP4: blocks of 16
