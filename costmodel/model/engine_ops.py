"""A model's ops as an engine runs them: fused kernels, the prompt's cache writes, tensor-parallel collectives."""

from __future__ import annotations

import dataclasses

import numpy as np

from costmodel.core.errors import CostModelError
from costmodel.counts.compiled import compile_block
from costmodel.model.ops import StepOp, as_number, program_step_ops
from costmodel.model.presets import ModelPreset
from costmodel.price.op import KernelOp, Precision

#: The sections of a step whose attention reads the decoder's own cache (full and sliding-window layers).
SELF_ATTENTION = ("self-attention", "local attention")


#: The section of the collectives tensor parallelism inserts into a step.
COLLECTIVES = "tensor parallel"


ENGINE_FUSIONS = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "ffn_gate_up": ("ffn_gate", "ffn_up"),
    "shared_gate_up": ("shared_gate", "shared_up"),
    "qkv_a_proj": ("q_down", "kv_down"),
    "kv_append": ("k_append", "v_append"),
}


def engine_ops(ops: list[StepOp], m: ModelPreset, tokens, precision) -> list[StepOp]:
    """A step's ops as serving engines run them: the :data:`ENGINE_FUSIONS` merged (one read of their
    shared input; FLOPs and weights unchanged), and rotary embeddings of the new q and k where the model
    has them (:func:`costmodel.counts.step_program.rope`; MLA rotates the p rotary dimensions of every query head
    and of the one shared key)."""
    out: list[StepOp] = []
    for s in ops:
        fused = next((name for name, parts in ENGINE_FUSIONS.items() if s.name in parts), None)
        group = [x for x in ops if x.section == s.section and fused and x.name in ENGINE_FUSIONS[fused]]
        if fused is None or len(group) < 2:
            out.append(s)
        elif s is group[0]:
            out.append(_merge(fused, group))
        if s.name == "q_proj" and m.rope and s.section in SELF_ATTENTION:
            heads, dim = (m.heads + 1, m.mla.rope_dim) if m.mla else (m.heads + m.kv_heads, m.head_dim)
            out += program_step_ops(
                s.section,
                compile_block("rope"),
                {"t": tokens, "j": heads, "p": dim},
                lambda name: s.count,
                Precision.of(precision),
            )
    return out


def prompt_cache_writes(ops: list[StepOp], m: ModelPreset, tokens, precision) -> list[StepOp]:
    """A prefill's ops with the prompt's keys and values written into the cache by a kernel of their own after each
    self-attention (:func:`costmodel.counts.step_program.kv_write`), for an engine whose attention call does not write
    them (an MLA latent is left as its program has it)."""
    if m.mla is not None:
        return ops
    out: list[StepOp] = []
    for s in ops:
        out.append(s)
        if s.name == "attention" and s.section in SELF_ATTENTION:
            out += program_step_ops(
                s.section,
                compile_block("kv_write"),
                {"t": tokens, "g": m.kv_heads, "k": 2 * m.head_dim},
                lambda name: s.count,
                precision,
            )
    return out


def reduces_per_layer(m: ModelPreset) -> int:
    """All-reduces per layer under tensor parallelism: a parallel block adds attention and FFN outputs before
    one; a sequential layer needs two."""
    return 1 if m.parallel_block else 2


def tensor_parallel(
    ops: list[StepOp],
    m: ModelPreset,
    t: int,
    tokens,
    encoder_tokens: int,
    act: float,
    dp: int = 1,
    all_reduce: str = "custom",
) -> list[StepOp]:
    """The ops of one of ``t`` devices (the ops of :func:`device_slice`'s model) with the collectives the
    sharding needs inserted: an all-reduce of each layer's ``tokens x d`` output per sharded block
    (:func:`reduces_per_layer`), and at a prefill two per encoder layer over its ``encoder_tokens``. Under
    attention data parallel over ``dp`` groups, each mixture-of-experts layer gathers the hidden states of every
    group's tokens before its experts and scatters their sum back after (vLLM's all-gather / reduce-scatter
    dispatch): an all-gather and a reduce-scatter of the ``dp x tokens x d`` buffer over the device's ``dp``
    peers, spread over all ``dp x t`` devices; the same whether the experts sit whole on the devices or sharded by
    width (either way a token's output is a sum over devices of every group)."""
    out = list(ops)
    if dp > 1:
        gathered = as_number(dp * tokens * m.d_model * act)
        out += [
            StepOp(COLLECTIVES, m.moe.layers, KernelOp(kind, name, "bf16", 0.0, gathered, devices=dp, span=dp * t))
            for kind, name in (("all_gather", "moe_dispatch"), ("reduce_scatter", "moe_combine"))
        ]
    if t == 1:
        return out
    reduce = lambda name, rows, count: StepOp(  # noqa: E731
        COLLECTIVES,
        count,
        KernelOp("all_reduce", name, "bf16", 0.0, as_number(rows * m.d_model * act), devices=t, all_reduce=all_reduce),
    )
    out = [*out, reduce("all_reduce", tokens, reduces_per_layer(m) * m.layers)]
    if encoder_tokens:
        out.append(reduce("encoder_all_reduce", encoder_tokens, 2 * m.encoder_layers))
    return out


def _merge(name: str, group: list[StepOp]) -> StepOp:
    first = group[0]
    flops = sum(s.op.flops for s in group)
    if first.shape is None:  # the cache writes: one kernel moving what both moved
        return StepOp(
            first.section,
            first.count,
            dataclasses.replace(first.op, name=name, flops=flops, bytes=sum(s.op.bytes for s in group)),
        )
    g = first.shape
    if not all(np.array_equal(getattr(s.shape, x), getattr(g, x)) for s in group for x in ("batch", "M", "K")):
        raise CostModelError(f"cannot fuse {', '.join(s.name for s in group)}: their inputs differ")
    shared_input = g.batch * g.M * g.K * g.width
    op = dataclasses.replace(
        first.op, name=name, flops=flops, bytes=sum(s.op.bytes for s in group) - (len(group) - 1) * shared_input
    )
    return StepOp(
        first.section, first.count, op, dataclasses.replace(g, N=sum(s.shape.N for s in group)), None, first.weighted
    )
