"""The ops of a model step: a model's layers as compiled programs, priced op by op by the loop a prediction
uses (:func:`costmodel.price.op.program_ops`): the attention program of :mod:`costmodel.counts.program` (with the
model's key/value heads) and the blocks around it of :mod:`costmodel.counts.step_program` (norms, residual adds, the
feed-forward block, the mixture-of-experts block, and once per step the embedding lookup, final norm and
output projection), each compiled once into one numpy function (:mod:`costmodel.counts.compiled`); then as serving
engines run them (fused projections, rotary embeddings), and with the collectives tensor parallelism inserts.
What one of ``t`` tensor-parallel devices holds is :func:`device_slice`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from costmodel.core.errors import CostModelError
from costmodel.counts.compiled import compile_block, compile_program
from costmodel.counts.ops import norm_name
from costmodel.model.presets import ModelPreset
from costmodel.model.routing import routed_blocks, routed_load
from costmodel.price.op import KernelOp, Precision
from costmodel.price.program_ops import program_ops

#: Parameters per norm weight element: RMSNorm has a scale, LayerNorm a scale and a shift.
NORM_PARAMS = {"rmsnorm": 1, "layernorm": 2}


@dataclass(frozen=True)
class StepOp:
    """``count`` kernels of one op of a model step (per-layer ops repeat once per layer): the op as a device
    prices it (:class:`costmodel.price.op.KernelOp`), its typed shape and einsum, the step's section it belongs
    to, and whether it is a GEMM over stored projection weights."""

    section: str
    count: int
    op: KernelOp
    shape: object = None
    einsum: str | None = None
    weighted: bool = False

    @property
    def name(self) -> str:
        return self.op.name


def as_number(x):
    """A float, or a float array where a dimension (the context of a request's steps) is an array."""
    return np.asarray(x, float) if np.ndim(x) else float(x)


def program_step_ops(
    section: str, compiled, dims: dict, count, precision: Precision, mode: str = "batched", **kernel
) -> list[StepOp]:
    """A compiled program's ops at ``dims`` as step ops of ``count(name)`` kernels each (none: left out)."""
    out = []
    for op, shape, einsum, weighted in program_ops(compiled, dims, mode, precision, **kernel):
        n = count(op.name)
        if n:
            op = dataclasses.replace(op, flops=as_number(op.flops), bytes=as_number(op.bytes))
            out.append(StepOp(section, n, op, shape, einsum, weighted))
    return out


def device_slice(m: ModelPreset, t: int, ep: bool = False, dp: int = 1, ep_size: int = 0) -> ModelPreset:
    """What one of ``t`` tensor-parallel devices holds: h/t query heads, max(g/t, 1) key/value heads
    (replicated when g < t; an MLA latent is replicated on every device), d_ff/t (each expert's too) and
    vocab/t. With ``ep`` (expert parallel over the same ``t`` devices, as TensorRT-LLM's moe_ep_size = tp)
    each device holds E/t whole routed experts instead of every expert's 1/t; with attention data parallel
    over ``dp`` groups of ``t``, E/(dp t) whole experts (expert parallel over all dp x t devices), or without
    ``ep`` every expert's 1/(dp t) (their width sharded over all dp x t devices: vLLM's data parallel without
    --enable-expert-parallel, its MoE layers a tensor-parallel group of dp x tp). ``ep_size`` between 1 and
    ``t`` (TensorRT-LLM's moe_ep_size, with moe_tp_size = t / ep_size): E/ep_size experts, each 1/(t/ep_size) of
    its width."""
    if ep_size and ep_size not in (1, t):
        return _expert_groups(m, t, dp, ep_size)
    ep = ep or (ep_size == t and t > 1)
    _check_experts(m, t, ep, dp)
    if t == 1:
        if dp > 1:
            return m.model_copy(
                update={
                    "moe": m.moe.model_copy(
                        update={"experts": m.moe.experts // dp, "expert_ranks": dp}
                        if ep
                        else {"expert_d_ff": m.moe.expert_d_ff // dp}
                    )
                }
            )
        return m
    _check_tensor_parallel(m, t, ep)
    share = lambda g: max(g // t, 1)  # noqa: E731
    update = {
        "heads": m.heads // t,
        "kv_heads": share(m.kv_heads),
        "d_ff": m.d_ff // t,
        "vocab": math.ceil(m.vocab / t),
        "encoder_kv_heads": share(m.enc_kv),
        "cross_kv_heads": share(m.cross_kv),
    }
    if m.mla:
        update["kv_heads"] = m.heads // t
    if m.moe and ep:
        update["moe"] = m.moe.model_copy(
            update={"experts": m.moe.experts // (t * dp), "expert_ranks": t * dp, "shared_d_ff": m.moe.shared_d_ff // t}
        )
    elif m.moe:
        update["moe"] = m.moe.model_copy(
            update={"expert_d_ff": m.moe.expert_d_ff // (t * dp), "shared_d_ff": m.moe.shared_d_ff // t}
        )
    return m.model_copy(update=update)


def _expert_groups(m: ModelPreset, t: int, dp: int, ep_size: int) -> ModelPreset:
    """One of ``t`` devices with the routed experts in ``ep_size`` groups (TensorRT-LLM's moe_ep_size, with
    moe_tp_size = t / ep_size): E/ep_size experts, each 1/(t/ep_size) of its width."""
    if not m.moe:
        raise CostModelError(f"expert parallel applies to mixture-of-experts models; {m.id} has none")
    if t % ep_size or dp > 1:
        raise CostModelError(
            f"an expert-parallel size of {ep_size} must divide tp {t} (without attention data parallel)"
        )
    sharded = device_slice(m, t)
    width = t // ep_size
    if m.moe.experts % ep_size or m.moe.expert_d_ff % width:
        raise CostModelError(
            f"{ep_size} expert-parallel groups of {width} must divide the {m.moe.experts} experts "
            f"and their width {m.moe.expert_d_ff} of {m.id}"
        )
    return sharded.model_copy(
        update={
            "moe": sharded.moe.model_copy(
                update={
                    "experts": m.moe.experts // ep_size,
                    "expert_ranks": ep_size,
                    "expert_d_ff": m.moe.expert_d_ff // width,
                }
            )
        }
    )


def _check_experts(m: ModelPreset, t: int, ep: bool, dp: int) -> None:
    """Expert parallel and attention data parallel apply to a mixture of experts whose experts (or their width)
    the devices divide."""
    if ep and not m.moe:
        raise CostModelError(f"expert parallel applies to mixture-of-experts models; {m.id} has none")
    if dp > 1 and not m.moe:
        raise CostModelError(
            f"attention data parallel applies to mixture-of-experts models (their experts run over "
            f"every group's devices); {m.id} has none: its groups would be independent replicas"
        )
    if dp > 1 and ep and m.moe.experts % (dp * t):
        raise CostModelError(
            f"expert parallel over {dp} x {t} devices must divide the {m.moe.experts} experts of {m.id}"
        )
    if dp > 1 and not ep and m.moe.expert_d_ff % (dp * t):
        raise CostModelError(
            f"the experts' width sharded over {dp} x {t} devices: {dp * t} must divide expert d_ff "
            f"{m.moe.expert_d_ff} of {m.id}"
        )


def _check_tensor_parallel(m: ModelPreset, t: int, ep: bool) -> None:
    """``t`` divides the query heads, the widths and (expert parallel) the experts; the key/value heads and ``t``
    divide one another."""
    if m.heads % t:
        raise CostModelError(f"tp {t} must divide the {m.heads} query heads of {m.id}")
    for name, g in (("kv heads", m.kv_heads), ("cross kv heads", m.cross_kv), ("encoder kv heads", m.enc_kv)):
        if g % t and t % g:
            raise CostModelError(f"tp {t} and the {g} {name} of {m.id}: one must divide the other")
    widths = [("d_ff", m.d_ff)]
    if m.moe:
        widths += [("shared expert d_ff", m.moe.shared_d_ff)] + ([] if ep else [("expert d_ff", m.moe.expert_d_ff)])
        if ep and m.moe.experts % t:
            raise CostModelError(f"expert parallel over {t} devices must divide the {m.moe.experts} experts of {m.id}")
    for name, width in widths:
        if width % t:
            raise CostModelError(f"tp {t} must divide {name} {width} of {m.id}")


def shape_dims(m: ModelPreset, g: int, b: int = 1, n: int = 1, ctx: int = 0) -> dict[str, int]:
    dims = {"b": b, "n": n, "m": ctx, "d": m.d_model, "h": m.heads, "g": g, "k": m.head_dim, "v": m.head_dim}
    if m.mla:
        dims |= {
            "k": m.mla.nope_dim,
            "v": m.mla.value_dim,
            "c": m.mla.kv_rank,
            "p": m.mla.rope_dim,
            "l": m.mla.q_rank or 1,
        }
    return dims


#: The MLA form engines run: attention in latent space for a decode step (a small cache read by every
#: head), per-head keys and values for a prefill (long query blocks make the naive form cheaper), as
#: vLLM's and SGLang's MLA backends do.
ENGINE_MLA_FORMS = {"incremental": "absorbed", "batched": "naive"}


def compiled_block(m: ModelPreset, mode: str, execution: str, cache_append: str, mla_form: str | None):
    if m.mla is None:
        return compile_program("gqa", mode, execution, cache_append), None
    if cache_append != "inplace":
        raise CostModelError("an MLA model appends its latent in place; cache append 'concat' does not apply")
    form = mla_form or ENGINE_MLA_FORMS[mode]
    return compile_program("mla", mode, execution, "inplace", form, m.mla.q_rank is not None), form


def _attention_ops(
    section: str,
    m: ModelPreset,
    g: int,
    mode: str,
    b: int,
    n: int,
    ctx,
    execution: str,
    count: int,
    precision: Precision,
    skip=(),
    cache_append: str = "inplace",
    window: int | None = None,
    mla_form: str | None = None,
) -> list[StepOp]:
    compiled, form = compiled_block(m, mode, execution, cache_append, mla_form)
    dims = shape_dims(m, g, b, n, ctx)
    kernel_dims = None
    if form:  # the attention kernel an MLA form runs (costmodel.counts.mla)
        from costmodel.counts.mla import mla_attention_dims

        kernel_dims = mla_attention_dims(dims, form)
    return program_step_ops(
        section,
        compiled,
        dims,
        lambda name: 0 if name in skip else count,
        precision,
        mode,
        kernel_dims=kernel_dims,
        window=window,
    )


def _layer_ops(
    section: str, m: ModelPreset, tokens, count: int, precision: Precision, norms: int, ffn_layers: int | None = None
) -> list[StepOp]:
    """Norms and residual adds (one after attention, one after the FFN) of ``count`` layers, and the dense
    FFN of ``ffn_layers`` of them."""
    ffn_layers = count if ffn_layers is None else ffn_layers
    block = compile_block("layer", m.norm, norms, m.ffn_gated)
    norm = norm_name(m.norm)
    return program_step_ops(
        section,
        block,
        {"t": tokens, "d": m.d_model, "f": m.d_ff},
        lambda name: 2 * count if name == "residuals" else count if name.startswith(norm) else ffn_layers,
        precision,
    )


def moe_dims(m: ModelPreset, tokens, dp: int = 1, spans_all: bool = False) -> dict:
    """The dimensions of a mixture-of-experts block over ``tokens`` tokens on one device: the rows routed to
    its experts and the experts of its own they touch (:func:`routed_load`), and the rows its elementwise
    kernels walk: those rows, or with ``spans_all`` (vLLM's fused MoE kernel, whose buffers hold every routed row
    of the batch it is given, rows of other devices' experts as zeros) all T k of them. Under attention data
    parallel the experts see the tokens of all ``dp`` groups (gathered), the router its own. ``called``: the
    tokens the grouped kernel is given (those seen, or with a kernel of the device's rows only, its rows over the
    experts per token), what an engine picks the kernel's tile by."""
    moe = m.moe
    seen = tokens * dp
    rows, touched = routed_load(moe, seen)
    dims = {
        "t": tokens,
        "d": m.d_model,
        "e": moe.routed_experts,
        "r": rows,
        "u": touched,
        "c": moe.expert_d_ff,
        "top": moe.experts_per_token,
        "v": seen * moe.experts_per_token if spans_all else rows,
        "called": seen if spans_all else rows / moe.experts_per_token,
    }
    blocks = routed_blocks(moe, seen)
    return dims if blocks is None else dims | {"blocks": blocks}


def moe_ops(
    m: ModelPreset, tokens, count: int, precision: Precision, dp: int = 1, spans_all: bool = False
) -> list[StepOp]:
    """The mixture-of-experts block of ``count`` layers over ``tokens`` tokens: the routed block
    (:func:`costmodel.counts.step_program.moe`; ``spans_all``: :func:`moe_dims`), and the shared experts as a dense FFN.
    The zeros written for other devices' rows are written by the grouped kernels: no launch of their own."""
    moe = m.moe
    dims = moe_dims(m, tokens, dp, spans_all)
    walked = bool(np.any(np.asarray(dims["v"]) > np.asarray(dims["r"])))
    ops = [
        dataclasses.replace(s, op=dataclasses.replace(s.op, launches=0)) if s.name == "experts_zero_fill" else s
        for s in program_step_ops(
            "experts",
            compile_block("moe", m.ffn_gated),
            dims,
            lambda name: 0 if name == "experts_zero_fill" and not walked else count,
            precision,
        )
    ]
    if moe.shared_d_ff:
        shared = compile_block("ffn", m.ffn_gated, "shared", bool(moe.shared_gate))
        ops += program_step_ops(
            "experts", shared, {"t": tokens, "d": m.d_model, "f": moe.shared_d_ff}, lambda name: count, precision
        )
    return ops


def local_context(m: ModelPreset, ctx):
    """Cached positions a local (sliding-window) layer attends to besides the new one: at most window - 1."""
    if not m.sliding_window:
        return ctx
    return np.minimum(ctx, m.sliding_window - 1) if np.ndim(ctx) else min(ctx, m.sliding_window - 1)


def step_ops(
    m: ModelPreset,
    phase: str,
    b: int,
    ctx,
    source: int,
    precision,
    execution: str,
    cache_append: str = "inplace",
    mla_form: str | None = None,
    dp: int = 1,
    moe_spans_all: bool = False,
) -> list[StepOp]:
    """Every op of one decode step (``phase="decode"``: one token per sequence after ``ctx`` cached
    positions) or of the prefill of a ``ctx``-token prompt (encoder over ``source`` tokens first).
    Local (sliding-window) layers attend to at most ``sliding_window`` positions; mixture-of-experts
    layers run the expert block instead of the dense FFN. ``precision``: a :class:`Precision`, or one width."""
    precision = Precision.of(precision)
    L = m.layers
    ops = _self_attention_ops(m, phase, b, ctx, precision, execution, cache_append, mla_form)
    tokens = b if phase == "decode" else b * ctx
    if m.architecture == "encoder-decoder":
        # cross-attention reads the K and V of the source, projected once at prefill
        n_cross = 1 if phase == "decode" else ctx
        ops += _attention_ops(
            "cross-attention",
            m,
            m.cross_kv,
            "batched",
            b,
            n_cross,
            source,
            execution,
            L,
            precision,
            skip=("k_proj", "v_proj", "mask"),
        )
    moe_layers = m.moe.layers if m.moe else 0
    ops += _layer_ops("ffn and norms", m, tokens, L, precision, m.norms_per_layer, ffn_layers=L - moe_layers)
    if moe_layers:
        ops += moe_ops(m, tokens, moe_layers, precision, dp, moe_spans_all)
    if phase == "prefill" and m.architecture == "encoder-decoder":
        ops += _encoder_ops(m, b, source, execution, precision)
    ops += program_step_ops(
        "head",
        compile_block("head", m.norm),
        {"t": tokens, "o": b, "d": m.d_model, "w": m.vocab},
        lambda name: 1,
        precision,
    )
    return ops


def _self_attention_ops(m: ModelPreset, phase, b, ctx, precision, execution, cache_append, mla_form) -> list[StepOp]:
    """The self-attention of every layer: global layers over the whole context, local ones within their window."""
    L, local = m.layers, m.local_layers
    groups = [(L - local, None), (local, m.sliding_window)]
    ops: list[StepOp] = []
    for count, window in groups:
        if not count:
            continue
        section = "self-attention" if window is None else "local attention"
        if phase == "decode":
            c = ctx if window is None else local_context(m, ctx)
            ops += _attention_ops(
                section,
                m,
                m.kv_heads,
                "incremental",
                b,
                1,
                c,
                execution,
                count,
                precision,
                cache_append=cache_append,
                mla_form=mla_form,
            )
        else:
            ops += _attention_ops(
                section,
                m,
                m.kv_heads,
                "batched",
                b,
                ctx,
                ctx,
                execution,
                count,
                precision,
                window=window,
                mla_form=mla_form,
            )
    return ops


def _encoder_ops(m: ModelPreset, b, source, execution, precision) -> list[StepOp]:
    """An encoder-decoder's prefill: the encoder over the source, and the source's cross-attention keys and values
    projected once."""
    L = m.layers
    ops: list[StepOp] = []
    enc = m.model_copy(update={"kv_heads": m.enc_kv})
    ops += _attention_ops(
        "encoder", enc, m.enc_kv, "batched", b, source, source, execution, m.encoder_layers, precision
    )
    ops += _layer_ops("encoder", enc, b * source, m.encoder_layers, precision, 2)
    ops += program_step_ops(
        "cross-attention",
        compile_block("cross_kv"),
        {"t": b * source, "d": m.d_model, "g": m.cross_kv, "k": m.head_dim},
        lambda name: L,
        precision,
    )
    return ops


#: Projections serving engines run as one GEMM over the concatenated weights (vLLM's QKVParallelLinear,
#: MergedColumnParallelLinear, and MLA's fused q_a/kv_a projection), and the K and V cache writes they run
#: as one kernel (reshape_and_cache).
