"""What a model keeps in memory: parameters by kind and the KV cache, read off the resident tensors of the same
ops the step prices (:mod:`costmodel.model_ops`), so the cost and the memory of a model cannot disagree; the
storage width of quantised weights; the largest batch and context that fit.
"""

from __future__ import annotations

from costmodel.compiled import compile_program
from costmodel.fits import largest_count
from costmodel.presets import ModelPreset
from costmodel.ops import Op, bias_elements, is_weight
from costmodel.vocab import choice

from costmodel.model_ops import NORM_PARAMS, _compiled, _dims, _head_ops, _layer_ops, local_context


def _attention_blocks(m: ModelPreset) -> list[tuple[int, int]]:
    """(layers, key/value heads) of every attention block: decoder self-attention, cross-attention and
    encoder self-attention."""
    blocks = [(m.layers, m.kv_heads)]
    if m.architecture == "encoder-decoder":
        blocks += [(m.layers, m.cross_kv), (m.encoder_layers, m.enc_kv)]
    return blocks


def _op_params(ops: list[Op], m: ModelPreset) -> int:
    """Parameters the ops read: their ``W_*`` operands (norm weights times NORM_PARAMS), and biases."""
    total = 0
    for op in ops:
        weights = sum(int(t.elements) for t in op.inputs if is_weight(t))
        total += weights * (NORM_PARAMS[m.norm] if op.kind == "elementwise" else 1)
        total += int(bias_elements(op)) if m.bias else 0
    return total


def param_groups(m: ModelPreset) -> dict[str, int]:
    """The model's parameters by kind: ``projections`` (attention, feed-forward and expert weights of the
    layers, what a quantized checkpoint stores in few bits), ``embeddings`` (input table and untied output
    projection), and ``other`` (norms, biases, routers). Attention weights are the program's resident
    tensors, the rest the weights of the same ops the step prices."""
    attention, _ = _compiled(m, "incremental", "unfused", "inplace", None)
    proj = other = 0
    for layers, g in _attention_blocks(m):
        dims = _dims(m, g)
        w = attention.resident(dims)[0]
        norms = (m.mla.kv_rank + (m.mla.q_rank or 0)) if m.mla else 0  # the latents' RMSNorm weights
        proj += layers * (w - norms)
        other += layers * (norms + (attention.bias_elements(dims) if m.bias else 0))
    moe_layers = m.moe.layers if m.moe else 0
    for op in _layer_ops(m, 1, m.norms_per_layer):
        n = _op_params([op], m) * (m.layers - moe_layers if op.kind == "einsum" else m.layers)
        if op.kind == "einsum":
            bias = int(bias_elements(op)) if m.bias else 0
            proj += n - bias * (m.layers - moe_layers)
            other += bias * (m.layers - moe_layers)
        else:
            other += n
    if m.moe:
        moe, d, up = m.moe, m.d_model, 2 if m.ffn_gated else 1
        proj += moe.layers * (moe.experts * (up + 1) * d * moe.expert_d_ff + (up + 1) * d * moe.shared_d_ff)
        other += moe.layers * (d * moe.routed_experts + d * moe.shared_gate + moe.routed_experts * moe.router_bias)
    if m.architecture == "encoder-decoder":
        enc = _op_params(_layer_ops(m, 1, 2), m)
        proj += m.encoder_layers * enc
        other += m.d_model * NORM_PARAMS[m.norm]
    head = _head_ops(m, 1, 1)
    other += _op_params(head[:2], m)
    embeddings = m.vocab * m.d_model * (1 if m.tied_embeddings else 2) + m.learned_positions * m.d_model
    return {"projections": int(proj), "embeddings": int(embeddings), "other": int(other)}


def param_count(m: ModelPreset) -> int:
    """Every parameter of the model (:func:`param_groups` summed)."""
    return sum(param_groups(m).values())


def model_facts(m: ModelPreset) -> dict:
    """What the model lists print beside a preset's shape: parameters (total, by kind, active per token) and
    KV-cache bytes per token in bf16, from the programs."""
    groups = param_groups(m)
    kv = (kv_cache_elements(m, 1, 1, 1) - kv_cache_elements(m, 1, 0, 1)) * 2
    return {"params": sum(groups.values()), "groups": groups, "active_params": active_params(m),
            "kv_bytes_per_token_bf16": kv}


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
    compiled, _ = _compiled(m, "incremental", "unfused", "inplace", None)
    g, local = m.kv_heads, m.local_layers
    total = (m.layers - local) * compiled.resident(_dims(m, g, b=batch, ctx=context))[1]
    if local:
        total += local * compiled.resident(_dims(m, g, b=batch, ctx=local_context(m, context)))[1]
    if m.architecture == "encoder-decoder":
        total += m.layers * compile_program("gqa", "batched").resident(_dims(m, m.cross_kv, b=batch, ctx=source))[1]
    return int(total)

#: Bits per stored element of each weight dtype (the elements; group scales are added by group size).


WEIGHT_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "fp8_block": 8, "int8": 8, "int4": 4, "mxfp4": 4}

#: Bits a scale group stores besides its weights: a 16-bit scale and a zero point of the weights' width
#: (AWQ's and GPTQ's layouts).
GROUP_BITS = {"int4": 16 + 4, "int8": 16 + 8, "mxfp4": 8}  # MXFP4: one 8-bit power-of-two scale per group


def weight_width(dtype: str, group_size: int = 0) -> float:
    """Bytes per projection weight: the dtype's bits, plus a group's scale and zero point shared by
    ``group_size`` weights (int4 with groups of 128: 0.5 + 2.5/128 = 0.520 bytes). Per-channel and
    per-tensor scales (group size 0) are left out: one per row or tensor, under 0.1% of the bytes."""
    dtype = choice("weight dtype", dtype, WEIGHT_BITS)
    extra = GROUP_BITS.get(dtype, 0) / group_size if group_size else 0
    return (WEIGHT_BITS[dtype] + extra) / 8


def weight_bytes(dev: ModelPreset, pr) -> int:
    """Bytes of the weights one device holds: projections in the weight storage, the rest in the activation dtype."""
    groups = param_groups(dev)
    return int(groups["projections"] * pr.storage.weight + (groups["embeddings"] + groups["other"]) * pr.storage.act)


def kv_bytes(dev: ModelPreset, pr, batch: int, context: int, source: int) -> int:
    """Bytes of the KV cache one device holds after a decode step at ``context``."""
    return int(kv_cache_elements(dev, batch, context, source) * pr.storage.kv)


def largest_batch_in_memory(dev: ModelPreset, pr, context: int, source: int) -> int:
    """The largest batch whose weights and KV cache after a step at ``context`` fit one device (the cache is
    linear in the batch)."""
    return largest_count(pr.hw.capacity - weight_bytes(dev, pr), kv_bytes(dev, pr, 1, context, source))

#: Group size assumed for int4 and int8 weights asked for on the command line (AWQ's and GPTQ's default).


DEFAULT_GROUP = {"int4": 128, "int8": 128, "mxfp4": 32}  # MXFP4 (OCP microscaling): blocks of 32
