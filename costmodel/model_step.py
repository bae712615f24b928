"""Whole models: a decode step and a prefill op by op, parameters and KV cache, on one or more devices.

A model's layer is the attention program of :mod:`costmodel.program` (with the model's key/value heads)
plus the ops around it, each costed from its shapes like every other op: norms, residual adds, the
feed-forward block (gated or not), and once per step the embedding lookup, final norm and output
projection. Parameters and KV-cache bytes are not typed here: they are the resident tensors of the same
ops (attention weights and caches from :meth:`costmodel.program.Program.resident_elements`, the rest from
the ops' ``W_*`` operands), so the cost and the memory of a model cannot disagree.

Tensor parallelism over ``t`` devices shards query heads, key/value heads (replicating them when
``g < t``, as Pope et al. 2022 and Ainslie et al. 2023 describe), the feed-forward width and the
vocabulary, and adds two all-reduces per layer priced from the profile's interconnect.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import sympy
from pydantic import Field

from costmodel import checks
from costmodel import symbols as S
from costmodel.compiled import compile_program
from costmodel.errors import CostModelError
from costmodel.reports import Report
from costmodel.hardware import HardwareProfile
from costmodel.presets import ModelPreset
from costmodel.program import Op, Tensor, bias_elements, gemm_dims, is_weight
from costmodel.shapes import GemmShape
from costmodel.mechanisms import efficiency_class, op_shape, time_model
from costmodel.mla import mla_attention_dims
from costmodel.price import Conventions, KernelOp, price
from costmodel.roofline import mechanism_lines
from costmodel.vocab import DEFAULTS, DTYPES, EXECUTIONS, MLA_FORMS, OVERLAPS, WEIGHT_DTYPES, choice

#: FLOPs per element of the ops around attention (conventions, like ELEMENTWISE_FLOPS).
NORM_FLOPS = {"rmsnorm": 4, "layernorm": 5}  # rms: square, sum, scale, weight; layer norm adds the mean
#: Parameters per norm weight element: RMSNorm has a scale, LayerNorm a scale and a shift.
NORM_PARAMS = {"rmsnorm": 1, "layernorm": 2}
ACT_FLOPS = {True: 5, False: 4}  # gated: silu(gate) * up; plain: gelu


@dataclass(frozen=True)
class Storage:
    """Bytes per element of each kind of tensor: activations, projection weights (group scales included)
    and the KV cache. An op's bytes are its elements of each kind times their width."""

    act: float
    weight: float
    kv: float

    @classmethod
    def of(cls, width) -> Storage:
        return width if isinstance(width, Storage) else cls(width, width, width)

    def bytes(self, elements, weights=0, cache=0):
        return _num((elements - weights - cache) * self.act + weights * self.weight + cache * self.kv)


def _num(x):
    """A float, or a float array where a dimension (the context of a request's steps) is an array."""
    return np.asarray(x, float) if np.ndim(x) else float(x)


@dataclass(frozen=True)
class Row:
    """One op of a model step: ``count`` kernels of it (per layer ops repeat ``layers`` times)."""

    section: str
    name: str
    einsum: str | None
    op_class: str
    flops: float
    bytes: float
    count: int
    gemm: tuple[int, int, int, int] | None = None  # (batch, M, K, N) of an einsum
    shape: object = None  # a fused attention kernel's typed shape (costmodel.shapes; costmodel.mechanisms.op_shape)
    weighted: bool = False  # a GEMM over projection weights (runs at the weights' dtype where it has a peak)


def _op(name: str, kind: str, inputs: list[tuple[str, dict]], output: tuple[str, dict], fpe: int = 0) -> Op:
    """An op from named index->size maps: its einsum equation and costs follow from the shapes."""
    to = lambda n, sizes: Tensor(n, "".join(sizes), tuple(sympy.Integer(v) for v in sizes.values()))  # noqa: E731
    return Op(name, kind, tuple(to(n, s) for n, s in inputs), to(*output), fpe)


def device_slice(m: ModelPreset, t: int) -> ModelPreset:
    """What one of ``t`` tensor-parallel devices holds: h/t query heads, max(g/t, 1) key/value heads
    (replicated when g < t; an MLA latent is replicated on every device), d_ff/t (each expert's too) and
    vocab/t."""
    if t == 1:
        return m
    if m.heads % t:
        raise CostModelError(f"tp {t} must divide the {m.heads} query heads of {m.id}")
    for name, g in (("kv heads", m.kv_heads), ("cross kv heads", m.cross_kv), ("encoder kv heads", m.enc_kv)):
        if g % t and t % g:
            raise CostModelError(f"tp {t} and the {g} {name} of {m.id}: one must divide the other")
    widths = [("d_ff", m.d_ff)]
    if m.moe:
        widths += [("expert d_ff", m.moe.expert_d_ff), ("shared expert d_ff", m.moe.shared_d_ff)]
    for name, width in widths:
        if width % t:
            raise CostModelError(f"tp {t} must divide {name} {width} of {m.id}")
    share = lambda g: max(g // t, 1)  # noqa: E731
    update = {"heads": m.heads // t, "kv_heads": share(m.kv_heads), "d_ff": m.d_ff // t,
              "vocab": math.ceil(m.vocab / t), "encoder_kv_heads": share(m.enc_kv), "cross_kv_heads": share(m.cross_kv)}
    if m.mla:
        update["kv_heads"] = m.heads // t
    if m.moe:
        update["moe"] = m.moe.model_copy(update={"expert_d_ff": m.moe.expert_d_ff // t,
                                                 "shared_d_ff": m.moe.shared_d_ff // t})
    return m.model_copy(update=update)


def _dims(m: ModelPreset, g: int, b: int = 1, n: int = 1, ctx: int = 0) -> dict[str, int]:
    dims = {"b": b, "n": n, "m": ctx, "d": m.d_model, "h": m.heads, "g": g, "k": m.head_dim, "v": m.head_dim}
    if m.mla:
        dims |= {"k": m.mla.nope_dim, "v": m.mla.value_dim, "c": m.mla.kv_rank, "p": m.mla.rope_dim,
                 "l": m.mla.q_rank or 1}
    return dims


#: The MLA form engines run: attention in latent space for a decode step (a small cache read by every
#: head), per-head keys and values for a prefill (long query blocks make the naive form cheaper), as
#: vLLM's and SGLang's MLA backends do.
ENGINE_MLA_FORMS = {"incremental": "absorbed", "batched": "naive"}


def _compiled(m: ModelPreset, mode: str, execution: str, cache_append: str, mla_form: str | None):
    if m.mla is None:
        return compile_program("gqa", mode, execution, cache_append), None
    if cache_append != "inplace":
        raise CostModelError("an MLA model appends its latent in place; cache append 'concat' does not apply")
    form = mla_form or ENGINE_MLA_FORMS[mode]
    return compile_program("mla", mode, execution, "inplace", form, m.mla.q_rank is not None), form


def _attention_rows(section: str, m: ModelPreset, g: int, mode: str, b: int, n: int, ctx: int, execution: str,
                    count: int, width, skip=(), cache_append: str = "inplace", window: int | None = None,
                    mla_form: str | None = None) -> list[Row]:
    storage = Storage.of(width)
    compiled, form = _compiled(m, mode, execution, cache_append, mla_form)
    dims = _dims(m, g, b, n, ctx)
    flops, elements, _, _ = compiled.at(dims)
    weights, cache = compiled.storage(dims)
    gemms = [tuple(x if np.ndim(x) else int(x) for x in g.values()) if g else None for g in compiled.gemm_shapes(dims)]
    kernel_dims = mla_attention_dims(dims, form) if form else dims
    rows = []
    for name, cls, eq, f, e, w, c, gemm in zip(compiled.names, compiled.kinds, compiled.einsums, flops, elements,
                                               weights, cache, gemms):
        if name in skip:
            continue
        shape = None
        if cls.startswith("fused") or name == "mask":
            shape = op_shape(efficiency_class(cls, name), kernel_dims, mode, None, name, storage.act)
            if window is not None and cls == "fused_prefill":
                shape = dataclasses.replace(shape, window=window)
        rows.append(Row(section, name, eq, cls, _num(f), storage.bytes(e, w, c), count, gemm, shape,
                        weighted=bool(gemm) and bool(np.all(np.asarray(w) > 0))))
    return rows


def _row(section: str, op: Op, count: int, width) -> Row:
    storage = Storage.of(width)
    cls = "projection" if op.kind == "einsum" else op.kind
    gemm = tuple(int(x) for x in gemm_dims(op)) if op.kind == "einsum" else None
    weights = sum(int(t.elements) for t in op.inputs if is_weight(t)) if op.kind == "einsum" else 0
    return Row(section, op.name, op.einsum, cls, float(op.flops), storage.bytes(int(op.memory_elements), weights),
               count, gemm, weighted=weights > 0)


def _ffn_ops(d: int, f: int, tokens: int, gated: bool, prefix: str = "ffn") -> list[Op]:
    """A feed-forward block of width ``f`` over ``tokens`` tokens: up (and gate), activation, down."""
    x, hidden = {"t": tokens, "d": d}, {"t": tokens, "f": f}
    ops = [_op(f"{prefix}_up", "einsum", [("x", x), ("W_up", {"d": d, "f": f})], ("u", hidden))]
    if gated:
        ops.append(_op(f"{prefix}_gate", "einsum", [("x", x), ("W_gate", {"d": d, "f": f})], ("u", hidden)))
        ops.append(_op(f"{prefix}_act", "elementwise", [("u", hidden), ("v", hidden)], ("a", hidden), ACT_FLOPS[True]))
    else:
        ops.append(_op(f"{prefix}_act", "elementwise", [("u", hidden)], ("a", hidden), ACT_FLOPS[False]))
    ops.append(_op(f"{prefix}_down", "einsum", [("a", hidden), ("W_down", {"f": f, "d": d})], ("y", x)))
    return ops


def _norm_name(m: ModelPreset) -> str:
    """The name of a model's norm ops, which picks their kernel's class: an engine runs its own RMSNorm
    kernel (``norm``) and torch's LayerNorm (``layernorm``)."""
    return "layernorm" if m.norm == "layernorm" else "norm"


def _norm_ops(m: ModelPreset, tokens: int, norms: int) -> list[Op]:
    x = {"t": tokens, "d": m.d_model}
    return [_op(f"{_norm_name(m)}_{i}", "elementwise", [("x", x), ("W_norm", {"d": m.d_model})], ("y", x),
                NORM_FLOPS[m.norm]) for i in range(norms)]


def _layer_ops(m: ModelPreset, tokens: int, norms: int) -> list[Op]:
    """Norms, residual adds and the dense feed-forward block of one layer over ``tokens`` tokens."""
    x = {"t": tokens, "d": m.d_model}
    return [*_norm_ops(m, tokens, norms), _op("residuals", "elementwise", [("x", x), ("a", x)], ("y", x), 1),
            *_ffn_ops(m.d_model, m.d_ff, tokens, m.ffn_gated)]


def _layer_rows(section: str, m: ModelPreset, tokens: int, count: int, width, norms: int,
                ffn_layers: int | None = None) -> list[Row]:
    """Norms and residual adds of ``count`` layers, and the dense FFN of ``ffn_layers`` of them."""
    # residual adds: one after attention and one after the FFN
    ffn_layers = count if ffn_layers is None else ffn_layers
    rows = []
    for op in _layer_ops(m, tokens, norms):
        n = 2 * count if op.name == "residuals" else count if op.name.startswith(_norm_name(m)) else ffn_layers
        if n:
            rows.append(_row(section, op, n, width))
    return rows


def experts_touched(experts: int, top_k: int, tokens):
    """Expected distinct experts ``tokens`` tokens route to when each picks ``top_k`` of ``experts``
    uniformly at random: E (1 - (1 - k/E)^T). One token touches k; a large batch touches them all."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


def _moe_rows(m: ModelPreset, tokens: int, count: int, width) -> list[Row]:
    """The mixture-of-experts block of ``count`` layers over ``tokens`` tokens: the router (a GEMM and a
    softmax over the experts), the routed experts as one grouped GEMM each way (every touched expert's
    weights read once, each token's row processed by its k experts), the weighted combine, and the shared
    experts as a dense FFN."""
    st = Storage.of(width)
    moe, d = m.moe, m.d_model
    E, k, f = moe.experts, moe.experts_per_token, moe.expert_d_ff
    routed = tokens * k
    touched = experts_touched(E, k, tokens)
    up_width = (2 if m.ffn_gated else 1) * f
    per_expert = math.ceil(routed / max(touched, 1))
    sec = "experts"
    router = _op("router", "einsum", [("x", {"t": tokens, "d": d}), ("W_router", {"d": d, "e": E})],
                 ("s", {"t": tokens, "e": E}))
    rows = [Row(sec, "router", router.einsum, "projection", float(router.flops),
                float(router.memory_elements) * st.act, count, (1, tokens, d, E)),
            Row(sec, "router_softmax", None, "elementwise", 5.0 * tokens * E, 2.0 * tokens * E * st.act, count),
            Row(sec, "experts_gate_up", None, "projection", 2.0 * routed * d * up_width,
                st.bytes(routed * d + touched * d * up_width + routed * up_width, touched * d * up_width), count,
                (math.ceil(touched), per_expert, d, up_width), weighted=True),
            Row(sec, "experts_act", None, "elementwise", float(ACT_FLOPS[m.ffn_gated] * routed * f),
                float(routed * (up_width + f)) * st.act, count),
            Row(sec, "experts_down", None, "projection", 2.0 * routed * f * d,
                st.bytes(routed * f + touched * f * d + routed * d, touched * f * d), count,
                (math.ceil(touched), per_expert, f, d), weighted=True),
            Row(sec, "experts_combine", None, "elementwise", 2.0 * routed * d, float(routed * d + tokens * d) * st.act,
                count)]
    if moe.shared_d_ff:
        rows += [_row(sec, op, count, width) for op in _ffn_ops(d, moe.shared_d_ff, tokens, m.ffn_gated, "shared")]
        if moe.shared_gate:
            gate = _op("shared_gate", "einsum", [("x", {"t": tokens, "d": d}), ("W_sg", {"d": d, "e": 1})],
                       ("s", {"t": tokens, "e": 1}))
            rows.append(_row(sec, gate, count, width))
    return rows


def _head_ops(m: ModelPreset, rows_out: int, tokens_in: int) -> list[Op]:
    """Embedding lookup of the new tokens, final norm and output projection of the last positions."""
    x_in, x_out = {"t": tokens_in, "d": m.d_model}, {"t": rows_out, "d": m.d_model}
    return [
        _op("embed", "copy", [("E[tokens]", x_in)], ("x", x_in)),
        _op(f"final_{_norm_name(m)}", "elementwise", [("x", x_out), ("W_norm", {"d": m.d_model})], ("y", x_out),
            NORM_FLOPS[m.norm]),
        _op("lm_head", "einsum", [("x", x_out), ("W_out", {"d": m.d_model, "w": m.vocab})],
            ("logits", {"t": rows_out, "w": m.vocab})),
    ]


def local_context(m: ModelPreset, ctx):
    """Cached positions a local (sliding-window) layer attends to besides the new one: at most window - 1."""
    if not m.sliding_window:
        return ctx
    return np.minimum(ctx, m.sliding_window - 1) if np.ndim(ctx) else min(ctx, m.sliding_window - 1)


def step_rows(m: ModelPreset, phase: str, b: int, ctx: int, source: int, width, execution: str,
              cache_append: str = "inplace", mla_form: str | None = None) -> list[Row]:
    """Every op of one decode step (``phase="decode"``: one token per sequence after ``ctx`` cached
    positions) or of the prefill of a ``ctx``-token prompt (encoder over ``source`` tokens first).
    Local (sliding-window) layers attend to at most ``sliding_window`` positions; mixture-of-experts
    layers run the expert block instead of the dense FFN."""
    L, local = m.layers, m.local_layers
    groups = [(L - local, None), (local, m.sliding_window)]
    rows: list[Row] = []
    for count, window in groups:
        if not count:
            continue
        section = "self-attention" if window is None else "local attention"
        if phase == "decode":
            c = ctx if window is None else local_context(m, ctx)
            rows += _attention_rows(section, m, m.kv_heads, "incremental", b, 1, c, execution, count, width,
                                    cache_append=cache_append, mla_form=mla_form)
        else:
            rows += _attention_rows(section, m, m.kv_heads, "batched", b, ctx, ctx, execution, count, width,
                                    window=window, mla_form=mla_form)
    tokens = b if phase == "decode" else b * ctx
    if m.architecture == "encoder-decoder":
        # cross-attention reads the K and V of the source, projected once at prefill
        n_cross = 1 if phase == "decode" else ctx
        rows += _attention_rows("cross-attention", m, m.cross_kv, "batched", b, n_cross, source, execution, L,
                                width, skip=("k_proj", "v_proj", "mask"))
    moe_layers = m.moe.layers if m.moe else 0
    rows += _layer_rows("ffn and norms", m, tokens, L, width, m.norms_per_layer, ffn_layers=L - moe_layers)
    if moe_layers:
        rows += _moe_rows(m, tokens, moe_layers, width)
    if phase == "prefill" and m.architecture == "encoder-decoder":
        enc = m.model_copy(update={"kv_heads": m.enc_kv})
        rows += _attention_rows("encoder", enc, m.enc_kv, "batched", b, source, source, execution,
                                m.encoder_layers, width)
        rows += _layer_rows("encoder", enc, b * source, m.encoder_layers, width, 2)
        kv = {"t": b * source, "d": m.d_model}
        for name in ("cross_k_proj", "cross_v_proj"):
            op = _op(name, "einsum", [("M", kv), ("P", {"d": m.d_model, "g": m.cross_kv, "k": m.head_dim})],
                     ("KV", {"t": b * source, "g": m.cross_kv, "k": m.head_dim}))
            rows.append(_row("cross-attention", op, L, width))
    rows += [_row("head", op, 1, Storage.of(width).act) for op in _head_ops(m, b, tokens)]
    return rows


#: Projections serving engines run as one GEMM over the concatenated weights (vLLM's QKVParallelLinear,
#: MergedColumnParallelLinear, and MLA's fused q_a/kv_a projection), and the K and V cache writes they run
#: as one kernel (reshape_and_cache).
ENGINE_FUSIONS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "ffn_gate_up": ("ffn_gate", "ffn_up"),
                  "shared_gate_up": ("shared_gate", "shared_up"), "qkv_a_proj": ("q_down", "kv_down"),
                  "kv_append": ("k_append", "v_append")}
#: FLOPs per rotated element of rotary embeddings: x * cos + rotate_half(x) * sin.
ROPE_FLOPS = 3


def engine_rows(rows: list[Row], m: ModelPreset, tokens: int, width) -> list[Row]:
    """A step's rows as serving engines run them: the :data:`ENGINE_FUSIONS` merged (one read of their
    shared input; FLOPs and weights unchanged), and rotary embeddings of the new q and k where the model
    has them (in place: q and k read and written, one cos/sin row per token read; MLA rotates the p
    rotary dimensions of every query head and of the one shared key)."""
    act = Storage.of(width).act
    out: list[Row] = []
    for row in rows:
        fused = next((name for name, parts in ENGINE_FUSIONS.items() if row.name in parts), None)
        group = [r for r in rows if r.section == row.section and fused and r.name in ENGINE_FUSIONS[fused]]
        if fused is None or len(group) < 2:
            out.append(row)
        elif row is group[0]:
            out.append(_merge(fused, group, act))
        if row.name == "q_proj" and m.rope and row.section in ("self-attention", "local attention"):
            heads, dim = (m.heads + 1, m.mla.rope_dim) if m.mla else (m.heads + m.kv_heads, m.head_dim)
            rotated = tokens * heads * dim
            out.append(Row(row.section, "rope", None, "elementwise", float(ROPE_FLOPS * rotated),
                           float((2 * rotated + tokens * dim) * act), row.count))
    return out


def _merge(name: str, group: list[Row], act: float) -> Row:
    first = group[0]
    if first.gemm is None:  # the cache writes: one kernel moving what both moved
        return Row(first.section, name, None, first.op_class, sum(r.flops for r in group),
                   sum(r.bytes for r in group), first.count)
    batch, M, K, _ = first.gemm
    if any(r.gemm[:3] != first.gemm[:3] for r in group):
        raise CostModelError(f"cannot fuse {', '.join(r.name for r in group)}: their inputs differ")
    N = sum(r.gemm[3] for r in group)
    shared_input = batch * M * K * act
    return Row(first.section, name, None, first.op_class, sum(r.flops for r in group),
               sum(r.bytes for r in group) - (len(group) - 1) * shared_input, first.count, (batch, M, K, N),
               weighted=first.weighted)


# --- what stays in memory: parameters and KV cache, from the same ops ----------------------------------

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
        other += moe.layers * (d * moe.experts + d * moe.shared_gate + moe.experts * moe.router_bias)
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


# --- the prediction ------------------------------------------------------------------------------------

class OpTime(Report):
    section: str
    name: str
    einsum: str | None
    flops: float
    bytes: float
    count: int
    time_s: float = Field(description="all kernels of this op in the step")
    bound: Literal["compute", "memory"]


class PhaseTime(Report):
    time_s: float
    flops: float
    bytes: float
    all_reduce_s: float
    all_reduces: int = 0
    ops: list[OpTime]


class ModelHardware(Report):
    id: str
    name: str
    dtype: str
    devices: int
    memory_capacity_bytes: float
    measured: bool
    efficiency: str = "datasheet roofline"  # or "fitted efficiency, graph timing", "transferred ..."


def model_hardware(pr: Pricing) -> ModelHardware:
    """The device as a model report states it, with what its time model is."""
    from costmodel.roofline import hardware_summary

    hw = pr.hw
    efficiency = hardware_summary(hw, pr.dtype, pr.model).efficiency or "datasheet roofline"
    return ModelHardware(id=hw.id, name=hw.name, dtype=pr.dtype, devices=pr.tp, memory_capacity_bytes=hw.capacity,
                         measured=hw.measured is not None, efficiency=efficiency)


class ModelShape(Report):
    id: str
    name: str
    params: int
    published_params: float | None
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    kv_heads_per_device: int
    active_params: int
    attention: str
    moe: dict | None = None
    mla: dict | None = None
    sliding_window: int | None = None
    local_layers: int = 0


class ModelWorkload(Report):
    batch: int
    context: int
    source: int | None
    dtype: str
    weight_dtype: str
    weight_group_size: int
    kv_dtype: str
    execution: str
    tp: int
    overlap: str


class ModelTotals(Report):
    tpot_s: float
    ttft_s: float
    tokens_per_s: float


class ModelMemory(Report):
    kv_cache_bytes_per_token: int
    kv_cache_bytes: int
    kv_cache_bytes_per_device: int
    weight_bytes_per_device: int
    capacity_bytes: float
    fits: bool
    max_batch: int
    max_context: int | None = Field(description="None: no limit (every layer caches at most its window)")


class ModelPrediction(Report):
    """A whole model on one device (or ``tp`` devices): decode step (TPOT), prefill (TTFT), memory.
    ``str()`` is the table, ``model_dump()`` the JSON."""

    hardware: ModelHardware
    model: ModelShape
    workload: ModelWorkload
    decode: PhaseTime
    prefill: PhaseTime
    total: ModelTotals
    memory: ModelMemory
    assumptions: list[str]

    def __str__(self) -> str:
        from costmodel.text import model_table

        return model_table(self)


def _row_time(r: Row, pr: Pricing):
    """The time of one kernel of a row under the pricing conventions (arrays where the row's counts are)."""
    shape = r.shape
    if r.gemm is not None:
        shape = GemmShape(*r.gemm, width=S.dtype_bytes(pr.dtype))
    compute_dtype = pr.gemm_dtype if (pr.gemm_dtype and r.weighted) else pr.dtype
    return price(KernelOp(r.op_class, r.name, compute_dtype, r.flops, r.bytes), shape, pr.hw,
                 Conventions(pr.model, pr.overlap))


def _price(rows: list[Row], pr: Pricing) -> list[OpTime]:
    out = []
    for r in rows:
        t = _row_time(r, pr)
        out.append(OpTime(section=r.section, name=r.name, einsum=r.einsum, flops=r.flops * r.count,
                          bytes=r.bytes * r.count, count=r.count, time_s=t.time * r.count, bound=t.bound))
    return out


def all_reduce_s(hw: HardwareProfile, t: int, nbytes: float) -> float:
    """Ring all-reduce of ``nbytes`` over ``t`` devices: 2(t-1)/t of the data each way, 2(t-1) steps."""
    if t == 1:
        return 0.0
    if hw.interconnect_bytes_per_s is None or hw.interconnect_latency_s is None:
        raise CostModelError(f"{hw.id} has no interconnect bandwidth and latency: tensor parallelism needs both")
    one_way = hw.interconnect_bytes_per_s.value / 2
    return 2 * (t - 1) / t * nbytes / one_way + 2 * (t - 1) * hw.interconnect_latency_s.value


#: Bits per stored element of each weight dtype (the elements; group scales are added by group size).
WEIGHT_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
#: Bits a scale group stores besides its weights: a 16-bit scale and a zero point of the weights' width
#: (AWQ's and GPTQ's layouts).
GROUP_BITS = {"int4": 16 + 4, "int8": 16 + 8}


def weight_width(dtype: str, group_size: int = 0) -> float:
    """Bytes per projection weight: the dtype's bits, plus a group's scale and zero point shared by
    ``group_size`` weights (int4 with groups of 128: 0.5 + 2.5/128 = 0.520 bytes). Per-channel and
    per-tensor scales (group size 0) are left out: one per row or tensor, under 0.1% of the bytes."""
    dtype = choice("weight dtype", dtype, WEIGHT_BITS)
    extra = GROUP_BITS.get(dtype, 0) / group_size if group_size else 0
    return (WEIGHT_BITS[dtype] + extra) / 8


def _max_context(fits, limit: int = 1 << 40) -> int:
    """The largest context for which ``fits(context)`` holds (monotone), 0 if none: doubling, then bisection."""
    if not fits(0):
        return 0
    lo, hi = 0, 1
    while hi < limit and fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


@dataclass(frozen=True)
class Pricing:
    """How a model's ops are priced on a device: dtypes and storage widths, the time model, the
    execution and engine conventions, tensor parallelism (every check done once, by :func:`pricing`)."""

    hw: HardwareProfile
    dtype: str
    weight_dtype: str
    group: int
    kv_dtype: str
    storage: Storage
    gemm_dtype: str | None
    execution: str
    overlap: str
    model: object  # costmodel.mechanisms.TimeModel
    engine: bool
    tp: int
    mla_form: str | None


def pricing(m: ModelPreset, hw: HardwareProfile, *, dtype: str = DEFAULTS["dtype"],
            execution: str = DEFAULTS["model_execution"], tp: int = DEFAULTS["tp"],
            overlap: str = DEFAULTS["overlap"], timing: str = DEFAULTS["timing"], without=(), engine: bool = True,
            weight_dtype: str | None = None, kv_dtype: str | None = None, mla_form: str | None = None) -> Pricing:
    """The pricing conventions of :func:`predict_model`, checked."""
    checks.instance("model", m, ModelPreset, "a ModelPreset (load_model(...))")
    checks.instance("hw", hw, HardwareProfile, "a HardwareProfile (load_profile(...))")
    checks.count("tp", tp)
    checks.flag("engine", engine)
    dtype, execution = choice("dtype", dtype, DTYPES), choice("execution", execution, EXECUTIONS)
    overlap = choice("overlap", overlap, OVERLAPS)
    if mla_form is not None:
        mla_form = choice("mla form", mla_form, MLA_FORMS)
        if m.mla is None:
            raise CostModelError(f"mla form applies to MLA models; {m.id} has {m.attention_label}")
    quant = m.quantization
    group = 0
    if weight_dtype is None and quant is not None:
        weight_dtype, group = quant.weight_dtype, quant.group_size
    elif weight_dtype is not None:
        weight_dtype = choice("weight dtype", weight_dtype, WEIGHT_DTYPES)
        group = DEFAULT_GROUP.get(weight_dtype, 0) if quant is None or quant.weight_dtype != weight_dtype else quant.group_size
    weight_dtype = weight_dtype or dtype
    kv_dtype = choice("kv dtype", kv_dtype, DTYPES) if kv_dtype else dtype
    model = time_model(hw, timing, without)
    hw.peak(dtype)
    device_slice(m, tp)  # a tp the model cannot be sharded over is an error before any arithmetic
    # W8A8: 8-bit weights run their GEMMs at the 8-bit peak where the device has one; int4 (W4A16) and
    # wider weights are dequantized to the activation dtype in the kernel
    gemm_dtype = weight_dtype if weight_dtype in ("fp8", "int8") and weight_dtype in hw.peak_flops_per_s else None
    storage = Storage(S.dtype_bytes(dtype), weight_width(weight_dtype, group), S.dtype_bytes(kv_dtype))
    return Pricing(hw, dtype, weight_dtype, group, kv_dtype, storage, gemm_dtype, execution, overlap, model, engine,
                   tp, mla_form)


def _phase_rows(m: ModelPreset, pr: Pricing, phase: str, batch: int, context, source: int) -> list[Row]:
    dev = device_slice(m, pr.tp)
    rows = step_rows(dev, phase, batch, context, source, pr.storage, pr.execution, mla_form=pr.mla_form)
    tokens = batch if phase == "decode" else batch * context
    return engine_rows(rows, dev, tokens, pr.storage) if pr.engine else rows


def reduces_per_layer(m: ModelPreset) -> int:
    """All-reduces per layer under tensor parallelism: a parallel block adds attention and FFN outputs before
    one; a sequential layer needs two."""
    return 1 if m.parallel_block else 2


def _reduce_s(m: ModelPreset, pr: Pricing, phase: str, batch: int, context: int, source: int) -> float:
    act = pr.storage.act
    tokens = batch if phase == "decode" else batch * context
    reduce_s = reduces_per_layer(m) * m.layers * all_reduce_s(pr.hw, pr.tp, tokens * m.d_model * act)
    if phase == "prefill" and m.architecture == "encoder-decoder":
        reduce_s += 2 * m.encoder_layers * all_reduce_s(pr.hw, pr.tp, batch * source * m.d_model * act)
    return reduce_s


def phase_time(m: ModelPreset, pr: Pricing, phase: str, batch: int, context: int, source: int) -> PhaseTime:
    """One decode step after ``context`` cached positions, or the prefill of a ``context``-token prompt."""
    ops = _price(_phase_rows(m, pr, phase, batch, context, source), pr)
    reduce_s = _reduce_s(m, pr, phase, batch, context, source)
    return PhaseTime(time_s=sum(o.time_s for o in ops) + reduce_s, flops=sum(o.flops for o in ops),
                     bytes=sum(o.bytes for o in ops), all_reduce_s=reduce_s,
                     all_reduces=reduces_per_layer(m) * m.layers if pr.tp > 1 else 0, ops=ops)


def decode_times(m: ModelPreset, pr: Pricing, batch: int, contexts, source: int | None = None):
    """Decode-step times (seconds) after each of ``contexts`` cached positions, all at once: the step's
    ops evaluated on an array of contexts (the same expressions and mechanisms as :func:`phase_time`)."""
    contexts = np.asarray(contexts, dtype=np.int64)
    rows = _phase_rows(m, pr, "decode", batch, contexts, source or 1)
    total = np.zeros(contexts.shape)
    for r in rows:
        total = total + np.asarray(_row_time(r, pr).time, float) * r.count
    return total + _reduce_s(m, pr, "decode", batch, 0, source or 1)


def predict_model(m: ModelPreset, hw: HardwareProfile, *, batch: int = DEFAULTS["batch"],
                  context: int = DEFAULTS["context"], source: int | None = None, dtype: str = DEFAULTS["dtype"],
                  execution: str = DEFAULTS["model_execution"], tp: int = DEFAULTS["tp"],
                  overlap: str = DEFAULTS["overlap"], timing: str = DEFAULTS["timing"],
                  without=(), engine: bool = True, weight_dtype: str | None = None, kv_dtype: str | None = None,
                  mla_form: str | None = None) -> ModelPrediction:
    """Decode step after ``context`` cached positions (TPOT), prefill of a ``context``-token prompt
    (TTFT), KV cache and weights per device, and the largest batch and context that fit. ``engine``:
    the step as serving engines run it (:func:`engine_rows`); False: every op of the programs alone.

    ``dtype`` is the activations' (and the math's) dtype; ``weight_dtype`` the projection weights' storage
    (default: the model's quantization, else ``dtype``); ``kv_dtype`` the cache's (default ``dtype``).
    ``mla_form`` fixes an MLA model's form (default: absorbed for decode, naive for prefill)."""
    checks.count("batch", batch)
    checks.count("context", context)
    checks.count("source", source, optional=True)
    pr = pricing(m, hw, dtype=dtype, execution=execution, tp=tp, overlap=overlap, timing=timing, without=without,
                 engine=engine, weight_dtype=weight_dtype, kv_dtype=kv_dtype, mla_form=mla_form)
    fixed_source, source = source, source or context
    dev = device_slice(m, tp)
    phases = {phase: phase_time(m, pr, phase, batch, context, source) for phase in ("decode", "prefill")}
    weights = weight_bytes(dev, pr)
    kv = kv_bytes(dev, pr, batch, context, source)
    free = hw.capacity - weights
    unlimited = m.local_layers == m.layers and m.architecture == "decoder"
    max_context = None if unlimited and free > kv_bytes(dev, pr, batch, m.sliding_window, 1) else \
        _max_context(lambda c: weights + kv_bytes(dev, pr, batch, c, fixed_source or max(c, 1)) <= hw.capacity)
    tpot = phases["decode"].time_s
    per_token = kv_bytes(m, pr, 1, 1, source) - kv_bytes(m, pr, 1, 0, source)
    return ModelPrediction(
        hardware=model_hardware(pr),
        model=ModelShape(id=m.id, name=m.name, params=param_count(m), active_params=active_params(m),
                         published_params=m.published_params, layers=m.layers, heads=m.heads, kv_heads=m.kv_heads,
                         head_dim=m.head_dim, kv_heads_per_device=dev.kv_heads, attention=m.attention_label,
                         moe=m.moe.model_dump() if m.moe else None, mla=m.mla.model_dump() if m.mla else None,
                         sliding_window=m.sliding_window, local_layers=m.local_layers),
        workload=ModelWorkload(batch=batch, context=context,
                               source=source if m.architecture == "encoder-decoder" else None, dtype=pr.dtype,
                               weight_dtype=pr.weight_dtype, weight_group_size=pr.group, kv_dtype=pr.kv_dtype,
                               execution=pr.execution, tp=tp, overlap=pr.overlap),
        decode=phases["decode"], prefill=phases["prefill"],
        total=ModelTotals(tpot_s=tpot, ttft_s=phases["prefill"].time_s, tokens_per_s=batch / tpot),
        memory=ModelMemory(
            kv_cache_bytes_per_token=per_token, kv_cache_bytes=kv, kv_cache_bytes_per_device=kv,
            weight_bytes_per_device=weights, capacity_bytes=hw.capacity, fits=kv + weights <= hw.capacity,
            max_batch=largest_batch_in_memory(dev, pr, context, source), max_context=max_context,
        ),
        assumptions=_assumptions(m, pr),
    )


def weight_bytes(dev: ModelPreset, pr: Pricing) -> int:
    """Bytes of the weights one device holds: projections in the weight storage, the rest in the activation dtype."""
    groups = param_groups(dev)
    return int(groups["projections"] * pr.storage.weight + (groups["embeddings"] + groups["other"]) * pr.storage.act)


def kv_bytes(dev: ModelPreset, pr: Pricing, batch: int, context: int, source: int) -> int:
    """Bytes of the KV cache one device holds after a decode step at ``context``."""
    return int(kv_cache_elements(dev, batch, context, source) * pr.storage.kv)


def largest_batch_in_memory(dev: ModelPreset, pr: Pricing, context: int, source: int) -> int:
    """The largest batch whose weights and KV cache after a step at ``context`` fit one device (the cache is
    linear in the batch)."""
    free = pr.hw.capacity - weight_bytes(dev, pr)
    return max(int(free // kv_bytes(dev, pr, 1, context, source)), 0) if free > 0 else 0


#: Group size assumed for int4 and int8 weights asked for on the command line (AWQ's and GPTQ's default).
DEFAULT_GROUP = {"int4": 128, "int8": 128}


def _assumptions(m: ModelPreset, pr: Pricing) -> list[str]:
    dtype, weight_dtype, group, gemm_dtype, mla_form = pr.dtype, pr.weight_dtype, pr.group, pr.gemm_dtype, pr.mla_form
    out = ["decode step: one token per sequence after `context` cached positions; prefill: a `context`-token prompt",
           *mechanism_lines(pr.hw, pr.model),
           "fused attention" if pr.execution == "fused" else "unfused attention"]
    if pr.engine:
        fused = "q, k and v projections as one GEMM, gate and up as one, the K and V cache writes as one kernel"
        out.append("as serving engines run it: " + fused + (", rotary embeddings on q and k" if m.rope else ""))
    else:
        out.append("every op of the programs as its own kernel (no engine fusion)")
    if m.mla:
        forms = f"the {mla_form} form in decode and prefill" if mla_form else (
            "absorbed form in decode (attention over the latent cache), naive form in prefill (per-head keys and "
            "values materialised)")
        out.append(f"multi-head latent attention: one cached latent of {m.mla.kv_rank} plus a rotary key of "
                   f"{m.mla.rope_dim} per position and layer, shared by all heads; {forms}")
    if m.moe:
        e = m.moe
        out.append(f"mixture of experts in {e.layers} of {m.layers} layers: {e.experts} experts, {e.experts_per_token} "
                   "per token, routed uniformly at random (a batch of T tokens touches E(1 - (1 - k/E)^T) distinct "
                   "experts, whose weights are read once per step); all experts resident in memory"
                   + (f"; shared experts of width {e.shared_d_ff}" if e.shared_d_ff else ""))
    if m.sliding_window:
        out.append(f"{m.local_layers} of {m.layers} layers attend within a sliding window of {m.sliding_window} "
                   "positions and cache only those (decode reads at most the window; the prefill kernel skips "
                   "key blocks outside it)")
    width = weight_width(weight_dtype, group)
    stored = f"projection weights in {weight_dtype}" + (
        f" with a 16-bit scale and a zero point per group of {group} ({width:.3f} bytes each)" if group else "")
    math_dtype = (f"GEMMs over {weight_dtype} weights at the {gemm_dtype} peak (W8A8)" if gemm_dtype else
                  f"math in {dtype}" + (" (weights dequantized in the kernel)" if weight_dtype != dtype else ""))
    out.append(f"storage: {stored}; embeddings, norms and routers in {dtype}; KV cache in {pr.kv_dtype}; "
               f"activations in {dtype}; {math_dtype}; no framework memory")
    if pr.tp > 1:
        reduces = ("one ring all-reduce per layer (parallel block)" if reduces_per_layer(m) == 1 else
                   "two ring all-reduces per layer")
        out.append(f"tensor parallel over {pr.tp} device(s): query heads, FFN and vocabulary sharded; key/value heads "
                   "sharded when t <= g, replicated when g < t" + ("; the MLA latent replicated" if m.mla else "")
                   + ("; each expert's width sharded" if m.moe else "") + f"; {reduces}")
    else:
        out.append("one device")
    return out
