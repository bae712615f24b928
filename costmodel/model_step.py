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

import math
from dataclasses import dataclass
from typing import Literal

import sympy
from pydantic import BaseModel, ConfigDict, Field

from costmodel import symbols as S
from costmodel.compiled import compile_program
from costmodel.errors import CostModelError
from costmodel.hardware import HardwareProfile
from costmodel.presets import ModelPreset
from costmodel.program import Op, Tensor, bias_elements, gemm_dims, is_weight
from costmodel.mechanisms import efficiency_class, op_shape, time_model
from costmodel.roofline import mechanism_lines, op_time
from costmodel.vocab import DEFAULTS, DTYPES, EXECUTIONS, OVERLAPS, choice
from costmodel.workload import check_count

#: FLOPs per element of the ops around attention (conventions, like ELEMENTWISE_FLOPS).
NORM_FLOPS = {"rmsnorm": 4, "layernorm": 5}  # rms: square, sum, scale, weight; layer norm adds the mean
#: Parameters per norm weight element: RMSNorm has a scale, LayerNorm a scale and a shift.
NORM_PARAMS = {"rmsnorm": 1, "layernorm": 2}
ACT_FLOPS = {True: 5, False: 4}  # gated: silu(gate) * up; plain: gelu


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
    shape: dict | None = None  # what a fused attention kernel's mechanisms need (costmodel.mechanisms.op_shape)


def _op(name: str, kind: str, inputs: list[tuple[str, dict]], output: tuple[str, dict], fpe: int = 0) -> Op:
    """An op from named index->size maps: its einsum equation and costs follow from the shapes."""
    to = lambda n, sizes: Tensor(n, "".join(sizes), tuple(sympy.Integer(v) for v in sizes.values()))  # noqa: E731
    return Op(name, kind, tuple(to(n, s) for n, s in inputs), to(*output), fpe)


def device_slice(m: ModelPreset, t: int) -> ModelPreset:
    """What one of ``t`` tensor-parallel devices holds: h/t query heads, max(g/t, 1) key/value heads
    (replicated when g < t), d_ff/t and vocab/t."""
    if t == 1:
        return m
    if m.heads % t:
        raise CostModelError(f"tp {t} must divide the {m.heads} query heads of {m.id}")
    for name, g in (("kv heads", m.kv_heads), ("cross kv heads", m.cross_kv), ("encoder kv heads", m.enc_kv)):
        if g % t and t % g:
            raise CostModelError(f"tp {t} and the {g} {name} of {m.id}: one must divide the other")
    if m.d_ff % t:
        raise CostModelError(f"tp {t} must divide d_ff {m.d_ff} of {m.id}")
    share = lambda g: max(g // t, 1)  # noqa: E731
    return m.model_copy(update={
        "heads": m.heads // t, "kv_heads": share(m.kv_heads), "d_ff": m.d_ff // t, "vocab": math.ceil(m.vocab / t),
        "encoder_kv_heads": share(m.enc_kv), "cross_kv_heads": share(m.cross_kv),
    })


def _dims(m: ModelPreset, g: int, b: int = 1, n: int = 1, ctx: int = 0) -> dict[str, int]:
    return {"b": b, "n": n, "m": ctx, "d": m.d_model, "h": m.heads, "g": g, "k": m.head_dim, "v": m.head_dim}


def _attention_rows(section: str, m: ModelPreset, g: int, mode: str, b: int, n: int, ctx: int, execution: str,
                    count: int, width: int, skip=(), cache_append: str = "inplace") -> list[Row]:
    compiled = compile_program("gqa", mode, execution, cache_append)
    dims = _dims(m, g, b, n, ctx)
    flops, elements, _, _ = compiled.at(dims)
    gemms = [tuple(int(x) for x in g.values()) if g else None for g in compiled.gemm_shapes(dims)]
    return [Row(section, name, eq, cls, float(f), float(e) * width, count, gemm,
                op_shape(efficiency_class(cls, name), dims, mode, None, name, width)
                if cls.startswith("fused") or name == "mask" else None)
            for name, cls, eq, f, e, gemm in zip(compiled.names, compiled.kinds, compiled.einsums, flops, elements, gemms)
            if name not in skip]


def _row(section: str, op: Op, count: int, width: int) -> Row:
    cls = "projection" if op.kind == "einsum" else op.kind
    gemm = tuple(int(x) for x in gemm_dims(op)) if op.kind == "einsum" else None
    return Row(section, op.name, op.einsum, cls, float(op.flops), float(op.memory_elements) * width, count, gemm)


def _layer_ops(m: ModelPreset, tokens: int, norms: int) -> list[Op]:
    """Norms, residual adds and the feed-forward block of one layer over ``tokens`` tokens."""
    d, f = m.d_model, m.d_ff
    x = {"t": tokens, "d": d}
    ops = [_op(f"norm_{i}", "elementwise", [("x", x), ("W_norm", {"d": d})], ("y", x), NORM_FLOPS[m.norm])
           for i in range(norms)]
    ops += [_op("residuals", "elementwise", [("x", x), ("a", x)], ("y", x), 1)]
    hidden = {"t": tokens, "f": f}
    ops.append(_op("ffn_up", "einsum", [("x", x), ("W_up", {"d": d, "f": f})], ("u", hidden)))
    if m.ffn_gated:
        ops.append(_op("ffn_gate", "einsum", [("x", x), ("W_gate", {"d": d, "f": f})], ("u", hidden)))
        ops.append(_op("ffn_act", "elementwise", [("u", hidden), ("v", hidden)], ("a", hidden), ACT_FLOPS[True]))
    else:
        ops.append(_op("ffn_act", "elementwise", [("u", hidden)], ("a", hidden), ACT_FLOPS[False]))
    ops.append(_op("ffn_down", "einsum", [("a", hidden), ("W_down", {"f": f, "d": d})], ("y", x)))
    return ops


def _layer_rows(section: str, m: ModelPreset, tokens: int, count: int, width: int, norms: int) -> list[Row]:
    # residual adds: one after attention and one after the FFN
    return [_row(section, op, 2 * count if op.name == "residuals" else count, width)
            for op in _layer_ops(m, tokens, norms)]


def _head_ops(m: ModelPreset, rows_out: int, tokens_in: int) -> list[Op]:
    """Embedding lookup of the new tokens, final norm and output projection of the last positions."""
    x_in, x_out = {"t": tokens_in, "d": m.d_model}, {"t": rows_out, "d": m.d_model}
    return [
        _op("embed", "copy", [("E[tokens]", x_in)], ("x", x_in)),
        _op("final_norm", "elementwise", [("x", x_out), ("W_norm", {"d": m.d_model})], ("y", x_out),
            NORM_FLOPS[m.norm]),
        _op("lm_head", "einsum", [("x", x_out), ("W_out", {"d": m.d_model, "w": m.vocab})],
            ("logits", {"t": rows_out, "w": m.vocab})),
    ]


def _norms(m: ModelPreset) -> int:
    """Norms per decoder layer: one for a parallel block, two otherwise, one more for cross-attention."""
    return (1 if m.parallel_block else 2) + (m.architecture == "encoder-decoder")


def step_rows(m: ModelPreset, phase: str, b: int, ctx: int, source: int, width: int, execution: str,
              cache_append: str = "inplace") -> list[Row]:
    """Every op of one decode step (``phase="decode"``: one token per sequence after ``ctx`` cached
    positions) or of the prefill of a ``ctx``-token prompt (encoder over ``source`` tokens first)."""
    L = m.layers
    if phase == "decode":
        rows = _attention_rows("self-attention", m, m.kv_heads, "incremental", b, 1, ctx, execution, L, width,
                               cache_append=cache_append)
        tokens = b
    else:
        rows = _attention_rows("self-attention", m, m.kv_heads, "batched", b, ctx, ctx, execution, L, width)
        tokens = b * ctx
    if m.architecture == "encoder-decoder":
        # cross-attention reads the K and V of the source, projected once at prefill
        n_cross = 1 if phase == "decode" else ctx
        rows += _attention_rows("cross-attention", m, m.cross_kv, "batched", b, n_cross, source, execution, L,
                                width, skip=("k_proj", "v_proj", "mask"))
    rows += _layer_rows("ffn and norms", m, tokens, L, width, _norms(m))
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
    rows += [_row("head", op, 1, width) for op in _head_ops(m, b, tokens)]
    return rows


#: Projections serving engines run as one GEMM over the concatenated weights (vLLM's QKVParallelLinear and
#: MergedColumnParallelLinear), and the K and V cache writes they run as one kernel (reshape_and_cache).
ENGINE_FUSIONS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "ffn_gate_up": ("ffn_gate", "ffn_up"),
                  "kv_append": ("k_append", "v_append")}
#: FLOPs per rotated element of rotary embeddings: x * cos + rotate_half(x) * sin.
ROPE_FLOPS = 3


def engine_rows(rows: list[Row], m: ModelPreset, tokens: int, width: int) -> list[Row]:
    """A step's rows as serving engines run them: the :data:`ENGINE_FUSIONS` merged (one read of their
    shared input; FLOPs and weights unchanged), and rotary embeddings of the new q and k where the model
    has them (in place: q and k read and written, one cos/sin row per token read)."""
    out: list[Row] = []
    for row in rows:
        fused = next((name for name, parts in ENGINE_FUSIONS.items() if row.name in parts), None)
        group = [r for r in rows if r.section == row.section and fused and r.name in ENGINE_FUSIONS[fused]]
        if fused is None or len(group) < 2:
            out.append(row)
        elif row is group[0]:
            out.append(_merge(fused, group, width))
        if row.name == "q_proj" and m.rope and row.section == "self-attention":
            heads = m.heads + m.kv_heads  # the device slice's q and k heads
            rotated = tokens * heads * m.head_dim
            out.append(Row(row.section, "rope", None, "elementwise", float(ROPE_FLOPS * rotated),
                           float((2 * rotated + tokens * m.head_dim) * width), row.count))
    return out


def _merge(name: str, group: list[Row], width: int) -> Row:
    first = group[0]
    if first.gemm is None:  # the cache writes: one kernel moving what both moved
        return Row(first.section, name, None, first.op_class, sum(r.flops for r in group),
                   sum(r.bytes for r in group), first.count)
    batch, M, K, _ = first.gemm
    if any(r.gemm[:3] != first.gemm[:3] for r in group):
        raise CostModelError(f"cannot fuse {', '.join(r.name for r in group)}: their inputs differ")
    N = sum(r.gemm[3] for r in group)
    shared_input = batch * M * K * width
    return Row(first.section, name, None, first.op_class, sum(r.flops for r in group),
               sum(r.bytes for r in group) - (len(group) - 1) * shared_input, first.count, (batch, M, K, N))


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


def param_count(m: ModelPreset) -> int:
    """Every parameter of the model: attention weights from the program's resident tensors, the
    feed-forward block and norms from their ops' weights, embeddings and output projection."""
    attention = compile_program("gqa", "incremental")
    total = 0
    for layers, g in _attention_blocks(m):
        dims = _dims(m, g)
        total += layers * (attention.resident(dims)[0] + (attention.bias_elements(dims) if m.bias else 0))
    total += m.layers * _op_params(_layer_ops(m, 1, _norms(m)), m)
    if m.architecture == "encoder-decoder":
        total += m.encoder_layers * _op_params(_layer_ops(m, 1, 2), m) + m.d_model * NORM_PARAMS[m.norm]
    head = _head_ops(m, 1, 1)
    total += _op_params(head, m) - (int(bias_elements(head[-1])) if m.bias else 0)  # the output projection has no bias
    if not m.tied_embeddings:
        total += m.vocab * m.d_model  # the input embedding table, the output projection's shape
    return int(total + m.learned_positions * m.d_model)


def kv_cache_elements(m: ModelPreset, batch: int, context: int, source: int) -> int:
    """K and V of every sequence after a decode step at ``context`` (context + 1 positions), and the
    cross-attention K and V of the ``source`` positions: the programs' resident cache tensors."""
    decode = compile_program("gqa", "incremental").resident(_dims(m, m.kv_heads, b=batch, ctx=context))[1]
    total = m.layers * decode
    if m.architecture == "encoder-decoder":
        total += m.layers * compile_program("gqa", "batched").resident(_dims(m, m.cross_kv, b=batch, ctx=source))[1]
    return int(total)


# --- the prediction ------------------------------------------------------------------------------------

class OpTime(BaseModel):
    section: str
    name: str
    einsum: str | None
    flops: float
    bytes: float
    count: int
    time_s: float = Field(description="all kernels of this op in the step")
    bound: Literal["compute", "memory"]


class PhaseTime(BaseModel):
    time_s: float
    flops: float
    bytes: float
    all_reduce_s: float
    ops: list[OpTime]


class ModelHardware(BaseModel):
    id: str
    name: str
    dtype: str
    devices: int
    memory_capacity_bytes: float
    measured: bool


class ModelShape(BaseModel):
    id: str
    name: str
    params: int
    published_params: float | None
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    kv_heads_per_device: int


class ModelWorkload(BaseModel):
    batch: int
    context: int
    source: int | None
    dtype: str
    execution: str
    tp: int
    overlap: str


class ModelTotals(BaseModel):
    tpot_s: float
    ttft_s: float
    tokens_per_s: float


class ModelMemory(BaseModel):
    kv_cache_bytes_per_token: int
    kv_cache_bytes: int
    kv_cache_bytes_per_device: int
    weight_bytes_per_device: int
    capacity_bytes: float
    fits: bool
    max_batch: int
    max_context: int


class ModelPrediction(BaseModel):
    """A whole model on one device (or ``tp`` devices): decode step (TPOT), prefill (TTFT), memory.
    ``str()`` is the table, ``model_dump()`` the JSON."""

    model_config = ConfigDict(frozen=True)

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


def _price(rows: list[Row], hw: HardwareProfile, dtype: str, overlap: str, model=None) -> list[OpTime]:
    out = []
    for r in rows:
        shape = {}
        if r.gemm is not None:
            shape = {**dict(zip(("batch", "M", "K", "N"), r.gemm)), "width": S.dtype_bytes(dtype)}
        elif r.shape is not None:
            shape = r.shape
        compute, memory, _, time = op_time(hw, r.op_class, dtype, r.flops, r.bytes, overlap, name=r.name,
                                           shape=shape, model=model)
        out.append(OpTime(section=r.section, name=r.name, einsum=r.einsum, flops=r.flops * r.count,
                          bytes=r.bytes * r.count, count=r.count, time_s=time * r.count,
                          bound="compute" if compute > memory else "memory"))
    return out


def all_reduce_s(hw: HardwareProfile, t: int, nbytes: float) -> float:
    """Ring all-reduce of ``nbytes`` over ``t`` devices: 2(t-1)/t of the data each way, 2(t-1) steps."""
    if t == 1:
        return 0.0
    if hw.interconnect_bytes_per_s is None or hw.interconnect_latency_s is None:
        raise CostModelError(f"{hw.id} has no interconnect bandwidth and latency: tensor parallelism needs both")
    one_way = hw.interconnect_bytes_per_s.value / 2
    return 2 * (t - 1) / t * nbytes / one_way + 2 * (t - 1) * hw.interconnect_latency_s.value


def predict_model(m: ModelPreset, hw: HardwareProfile, *, batch: int = DEFAULTS["batch"],
                  context: int = DEFAULTS["context"], source: int | None = None, dtype: str = DEFAULTS["dtype"],
                  execution: str = DEFAULTS["model_execution"], tp: int = DEFAULTS["tp"],
                  overlap: str = DEFAULTS["overlap"], timing: str = DEFAULTS["timing"],
                  without=(), engine: bool = True) -> ModelPrediction:
    """Decode step after ``context`` cached positions (TPOT), prefill of a ``context``-token prompt
    (TTFT), KV cache and weights per device, and the largest batch and context that fit. ``engine``:
    the step as serving engines run it (:func:`engine_rows`); False: every op of the programs alone."""
    for name, value in (("batch", batch), ("context", context), ("tp", tp), ("source", source)):
        check_count(name, value)
    dtype, execution = choice("dtype", dtype, DTYPES), choice("execution", execution, EXECUTIONS)
    overlap = choice("overlap", overlap, OVERLAPS)
    model = time_model(hw, timing, without)
    hw.peak(dtype)
    width = S.dtype_bytes(dtype)
    fixed_source, source = source, source or context
    dev = device_slice(m, tp)
    phases = {}
    for phase, tokens in (("decode", batch), ("prefill", batch * context)):
        rows = step_rows(dev, phase, batch, context, source, width, execution)
        if engine:
            rows = engine_rows(rows, dev, tokens, width)
        ops = _price(rows, hw, dtype, overlap, model)
        reduce_s = 2 * m.layers * all_reduce_s(hw, tp, tokens * m.d_model * width)
        if phase == "prefill" and m.architecture == "encoder-decoder":
            reduce_s += 2 * m.encoder_layers * all_reduce_s(hw, tp, batch * source * m.d_model * width)
        phases[phase] = PhaseTime(time_s=sum(o.time_s for o in ops) + reduce_s, flops=sum(o.flops for o in ops),
                                  bytes=sum(o.bytes for o in ops), all_reduce_s=reduce_s, ops=ops)
    weights = param_count(dev) * width
    kv = kv_cache_elements(dev, batch, context, source) * width
    # the cache is linear in the batch and in the context: per sequence, and per position at a fixed batch
    # (an encoder-decoder's source length follows the context unless it was given)
    per_sequence = kv_cache_elements(dev, 1, context, source) * width
    at0 = kv_cache_elements(dev, batch, 0, fixed_source or 0) * width
    per_position = kv_cache_elements(dev, batch, 1, fixed_source or 1) * width - at0
    free = hw.capacity - weights
    tpot = phases["decode"].time_s
    return ModelPrediction(
        hardware=ModelHardware(id=hw.id, name=hw.name, dtype=dtype, devices=tp, memory_capacity_bytes=hw.capacity,
                               measured=hw.measured is not None),
        model=ModelShape(id=m.id, name=m.name, params=param_count(m), published_params=m.published_params,
                         layers=m.layers, heads=m.heads, kv_heads=m.kv_heads, head_dim=m.head_dim,
                         kv_heads_per_device=dev.kv_heads),
        workload=ModelWorkload(batch=batch, context=context,
                               source=source if m.architecture == "encoder-decoder" else None, dtype=dtype,
                               execution=execution, tp=tp, overlap=overlap),
        decode=phases["decode"], prefill=phases["prefill"],
        total=ModelTotals(tpot_s=tpot, ttft_s=phases["prefill"].time_s, tokens_per_s=batch / tpot),
        memory=ModelMemory(
            kv_cache_bytes_per_token=(kv_cache_elements(m, 1, 1, source) - kv_cache_elements(m, 1, 0, source)) * width,
            kv_cache_bytes=kv, kv_cache_bytes_per_device=kv, weight_bytes_per_device=weights,
            capacity_bytes=hw.capacity, fits=kv + weights <= hw.capacity,
            max_batch=max(int(free // per_sequence), 0) if free > 0 else 0,
            max_context=max(int((free - at0) // per_position), 0) if free > at0 else 0,
        ),
        assumptions=[
            "decode step: one token per sequence after `context` cached positions; prefill: a `context`-token prompt",
            *mechanism_lines(hw, model),
            "fused attention" if execution == "fused" else "unfused attention",
            ("as serving engines run it: q, k and v projections as one GEMM, gate and up as one, the K and V "
             "cache writes as one kernel" + (", rotary embeddings on q and k" if m.rope else "")) if engine else
            "every op of the programs as its own kernel (no engine fusion)",
            "weights: every parameter in the storage dtype; no activations or framework memory",
            f"tensor parallel over {tp} device(s): query heads, FFN and vocabulary sharded; key/value heads sharded "
            "when t <= g, replicated when g < t; two ring all-reduces per layer" if tp > 1 else "one device",
        ],
    )
