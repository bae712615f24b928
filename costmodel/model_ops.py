"""The ops of a model step: a model's layers as the attention program of :mod:`costmodel.program` (with the
model's key/value heads) plus the ops around it, each costed from its shapes like every other op: norms,
residual adds, the feed-forward block (gated or not), the mixture-of-experts block, and once per step the
embedding lookup, final norm and output projection; then as serving engines run them (fused projections,
rotary embeddings). What one of ``t`` tensor-parallel devices holds is :func:`device_slice`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from costmodel.compiled import compile_program
from costmodel.errors import CostModelError
from costmodel.mechanisms import efficiency_class, op_shape
from costmodel.presets import ModelPreset
from costmodel.ops import ELEMENTWISE_FLOPS, Op, Tensor, gemm_dims, is_weight


#: FLOPs per element of the ops around attention (conventions, like ELEMENTWISE_FLOPS).
NORM_FLOPS = {"rmsnorm": 4, "layernorm": 5}  # rms: square, sum, scale, weight; layer norm adds the mean

#: Parameters per norm weight element: RMSNorm has a scale, LayerNorm a scale and a shift.
NORM_PARAMS = {"rmsnorm": 1, "layernorm": 2}

ACT_FLOPS = {True: 5, False: 4}  # gated: silu(gate) * up; plain: gelu
#: A softmax over the router's scores: as the attention programs count one (costmodel.program.ELEMENTWISE_FLOPS).
SOFTMAX_FLOPS = ELEMENTWISE_FLOPS["softmax"]


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
    devices: int = 1  # a collective's group (op class ``all_reduce``)


def _op(name: str, kind: str, inputs: list[tuple[str, dict]], output: tuple[str, dict], fpe: int = 0) -> Op:
    """An op from named index->size maps: its einsum equation and costs follow from the shapes (numbers: the
    counts are plain arithmetic, as :mod:`costmodel.program` counts numeric shapes)."""
    to = lambda n, sizes: Tensor(n, "".join(sizes), tuple(sizes.values()))  # noqa: E731
    return Op(name, kind, tuple(to(n, s) for n, s in inputs), to(*output), fpe)


def device_slice(m: ModelPreset, t: int, ep: bool = False) -> ModelPreset:
    """What one of ``t`` tensor-parallel devices holds: h/t query heads, max(g/t, 1) key/value heads
    (replicated when g < t; an MLA latent is replicated on every device), d_ff/t (each expert's too) and
    vocab/t. With ``ep`` (expert parallel over the same ``t`` devices, as TensorRT-LLM's moe_ep_size = tp)
    each device holds E/t whole routed experts instead of every expert's 1/t."""
    if ep and not m.moe:
        raise CostModelError(f"expert parallel applies to mixture-of-experts models; {m.id} has none")
    if t == 1:
        return m
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
    share = lambda g: max(g // t, 1)  # noqa: E731
    update = {"heads": m.heads // t, "kv_heads": share(m.kv_heads), "d_ff": m.d_ff // t,
              "vocab": math.ceil(m.vocab / t), "encoder_kv_heads": share(m.enc_kv), "cross_kv_heads": share(m.cross_kv)}
    if m.mla:
        update["kv_heads"] = m.heads // t
    if m.moe and ep:
        update["moe"] = m.moe.model_copy(update={"experts": m.moe.experts // t, "expert_ranks": t,
                                                 "shared_d_ff": m.moe.shared_d_ff // t})
    elif m.moe:
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
    if form:  # the attention kernel an MLA form runs (costmodel.mla)
        from costmodel.mla import mla_attention_dims

        dims_kernel = mla_attention_dims(dims, form)
    kernel_dims = dims_kernel if form else dims
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


def _row(section: str, op: Op, count: int, width, gemm: tuple | None = None, weighted: bool | None = None) -> Row:
    """A step's row of ``count`` kernels of ``op``: FLOPs and bytes from its shapes (weights in their storage
    width); a matrix product's (batch, M, K, N) from its einsum, or ``gemm`` for a grouped product."""
    storage = Storage.of(width)
    products = op.kind in ("einsum", "grouped")
    cls = "projection" if products else op.kind
    if gemm is None and op.kind == "einsum":
        gemm = tuple(int(x) for x in gemm_dims(op))
    weights = sum(t.elements for t in op.inputs if is_weight(t)) if products else 0
    return Row(section, op.name, op.einsum, cls, float(op.flops), storage.bytes(op.memory_elements, weights),
               count, gemm, weighted=weights > 0 if weighted is None else weighted)


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


def local_experts_touched(moe, tokens):
    """Distinct experts of one device that ``tokens`` tokens route to: each of its experts is touched with the
    probability 1 - (1 - k/E)^T of the whole model's E experts."""
    return moe.experts * (1 - (1 - moe.experts_per_token / moe.routed_experts) ** tokens)


def _moe_rows(m: ModelPreset, tokens: int, count: int, width) -> list[Row]:
    """The mixture-of-experts block of ``count`` layers over ``tokens`` tokens: the router (a GEMM and a
    softmax over the experts), the routed experts as one grouped GEMM each way (every touched expert's
    weights read once, each token's row processed by its k experts), the weighted combine, and the shared
    experts as a dense FFN."""
    st = Storage.of(width)
    moe, d = m.moe, m.d_model
    k, f = moe.experts_per_token, moe.expert_d_ff
    routed = tokens * k / moe.expert_ranks  # expected rows routed to this device's experts
    touched = local_experts_touched(moe, tokens)
    sec = "experts"
    rows = []
    for op in _moe_ops(m, tokens):
        if op.kind == "grouped":  # the touched experts run as a batch of GEMMs, the routed rows shared out
            K, N = (d, op.output.shape[1]) if op.name == "experts_gate_up" else (f, d)
            gemm = (math.ceil(touched), math.ceil(routed / max(touched, 1)), K, N)
            rows.append(_row(sec, op, count, width, gemm=gemm))
        else:  # the router's weights stay in the activation dtype, and its GEMM runs there
            rows.append(_row(sec, op, count, st.act, weighted=False))
    if moe.shared_d_ff:
        rows += [_row(sec, op, count, width) for op in _ffn_ops(d, moe.shared_d_ff, tokens, m.ffn_gated, "shared")]
        if moe.shared_gate:
            gate = _op("shared_gate", "einsum", [("x", {"t": tokens, "d": d}), ("W_sg", {"d": d, "e": 1})],
                       ("s", {"t": tokens, "e": 1}))
            rows.append(_row(sec, gate, count, width))
    return rows


def _moe_ops(m: ModelPreset, tokens: int) -> list[Op]:
    """The routed part of a mixture-of-experts block over ``tokens`` tokens, each op from its shapes: the router
    (a GEMM and a softmax over the E experts), the routed experts as grouped products over the ``u`` experts
    the batch touches (every touched expert's weights read once, each of the ``r = tokens x k`` routed rows
    through its expert), the activation, and the weighted combine of each token's k rows."""
    moe, d = m.moe, m.d_model
    E, k, f = moe.routed_experts, moe.experts_per_token, moe.expert_d_ff
    r, u = tokens * k / moe.expert_ranks, local_experts_touched(moe, tokens)
    up = (2 if m.ffn_gated else 1) * f
    return [
        _op("router", "einsum", [("x", {"t": tokens, "d": d}), ("W_router", {"d": d, "e": E})],
            ("s", {"t": tokens, "e": E})),
        _op("router_softmax", "elementwise", [("s", {"t": tokens, "e": E})], ("p", {"t": tokens, "e": E}),
            SOFTMAX_FLOPS),
        _op("experts_gate_up", "grouped", [("x", {"r": r, "d": d}), ("W_up", {"u": u, "d": d, "f": up})],
            ("h", {"r": r, "f": up})),
        _op("experts_act", "elementwise", [("h", {"r": r, "f": up})], ("a", {"r": r, "c": f}), ACT_FLOPS[m.ffn_gated]),
        _op("experts_down", "grouped", [("a", {"r": r, "c": f}), ("W_down", {"u": u, "c": f, "d": d})],
            ("y", {"r": r, "d": d})),
        # a multiply and an add per element of each of a token's k rows
        _op("experts_combine", "elementwise", [("y", {"r": r, "d": d})], ("z", {"t": tokens, "d": d}), 2 * k),
    ]


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
            # in place: q and k read and written, one cos/sin row per token read
            rope = _op("rope", "elementwise", [("qk", {"t": tokens, "j": heads, "p": dim}),
                                               ("cos_sin", {"t": tokens, "p": dim})],
                       ("qk", {"t": tokens, "j": heads, "p": dim}), ROPE_FLOPS)
            out.append(_row(row.section, rope, row.count, act))
    return out


#: The section of the collectives tensor parallelism inserts into a step.
COLLECTIVES = "tensor parallel"


def reduces_per_layer(m: ModelPreset) -> int:
    """All-reduces per layer under tensor parallelism: a parallel block adds attention and FFN outputs before
    one; a sequential layer needs two."""
    return 1 if m.parallel_block else 2


def tensor_parallel(rows: list[Row], m: ModelPreset, t: int, tokens: int, encoder_tokens: int, act: float) -> list[Row]:
    """The rows of one of ``t`` devices (the ops of :func:`device_slice`'s model) with the collectives the
    sharding needs inserted: an all-reduce of each layer's ``tokens x d`` output per sharded block
    (:func:`reduces_per_layer`), and at a prefill two per encoder layer over its ``encoder_tokens``."""
    if t == 1:
        return rows
    out = [*rows, Row(COLLECTIVES, "all_reduce", None, "all_reduce", 0.0, tokens * m.d_model * act,
                      reduces_per_layer(m) * m.layers, devices=t)]
    if encoder_tokens:
        out.append(Row(COLLECTIVES, "encoder_all_reduce", None, "all_reduce", 0.0, encoder_tokens * m.d_model * act,
                       2 * m.encoder_layers, devices=t))
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
