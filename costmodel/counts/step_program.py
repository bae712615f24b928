"""The ops of a model step around attention, as programs over named symbolic dimensions like attention's
(:mod:`costmodel.counts.program`), each op's costs derived from its operands' shapes by :mod:`costmodel.counts.ops`:

* ``layer``: a layer's norms, its two residual adds and its dense feed-forward block (gated or not);
* ``ffn``: a feed-forward block alone (a mixture of experts' shared experts), with the shared experts' gate;
* ``moe``: the routed part of a mixture-of-experts block: the router (a GEMM and a softmax over the ``e``
  experts), the routed experts as grouped products over the ``u`` experts a batch touches (every touched
  expert's weights read once, each of the ``r`` routed rows through its expert), the activation and the
  weighted combine of each token's ``top`` rows over the ``v`` rows the kernels' buffers span, and the zeros a
  kernel writes for the ``v - r`` of them routed to other devices (vLLM's fused MoE under expert parallel);
* ``head``: the embedding lookup of ``t`` new tokens, the final norm and output projection of ``o`` rows;
* ``rope``: rotary embeddings of ``j`` heads' ``p`` rotary dimensions, in place;
* ``cross_kv``: an encoder-decoder's cross-attention key and value projections of the source.

Projection weights a checkpoint stores in the weight dtype are named ``P_*``; the router's, the output
projection's and the norms' weights (``W_*``) stay in the activation dtype. :func:`costmodel.counts.compiled.compile_block`
compiles a block once into one numpy function, as attention's programs are compiled.
"""

from __future__ import annotations

import sympy

from costmodel.counts.ops import ELEMENTWISE_FLOPS, Op, Tensor, norm_name

#: FLOPs per element of the ops around attention (conventions, like ELEMENTWISE_FLOPS).
NORM_FLOPS = {"rmsnorm": 4, "layernorm": 5}  # rms: square, sum, scale, weight; layer norm adds the mean
ACT_FLOPS = {True: 5, False: 4}  # gated: silu(gate) * up; plain: gelu
#: A softmax over the router's scores: as the attention programs count one.
SOFTMAX_FLOPS = ELEMENTWISE_FLOPS["softmax"]
#: FLOPs per rotated element of rotary embeddings: x * cos + rotate_half(x) * sin.
ROPE_FLOPS = 3

#: The dimensions of the blocks: tokens (t), rows that produce a token (o), model width (d), feed-forward width (f),
#: vocabulary (w), routed experts (e), rows routed to this device's experts (r), routed rows the block's elementwise
#: kernels walk (v: r, or every routed row of the batch where the engine's kernel spans them all), experts the batch
#: touches (u), an expert's feed-forward width (c), experts per token (top), rotated heads (j), rotary dimensions
#: (p), key/value heads (g) and head dimension (k).
t, o, d, f, w, e, r, u, c, top, j, p, g, k = sympy.symbols("t o d f w e r u c top j p g k", positive=True)
v = sympy.Symbol("v", nonnegative=True)


def _op(name: str, kind: str, inputs: list[tuple[str, dict]], output: tuple[str, dict], fpe=0) -> Op:
    """An op from named index->size maps; its einsum equation and costs follow from the shapes."""
    to = lambda n, sizes: Tensor(n, "".join(sizes), tuple(sizes.values()))  # noqa: E731
    return Op(name, kind, tuple(to(n, s) for n, s in inputs), to(*output), fpe)


def _ffn(gated: bool, prefix: str) -> list[Op]:
    """A feed-forward block of width ``f`` over ``t`` tokens: up (and gate), activation, down."""
    x, hidden = {"t": t, "d": d}, {"t": t, "f": f}
    ops = [_op(f"{prefix}_up", "einsum", [("x", x), ("P_up", {"d": d, "f": f})], ("u", hidden))]
    if gated:
        ops.append(_op(f"{prefix}_gate", "einsum", [("x", x), ("P_gate", {"d": d, "f": f})], ("u", hidden)))
        ops.append(_op(f"{prefix}_act", "elementwise", [("u", hidden), ("v", hidden)], ("a", hidden), ACT_FLOPS[True]))
    else:
        ops.append(_op(f"{prefix}_act", "elementwise", [("u", hidden)], ("a", hidden), ACT_FLOPS[False]))
    ops.append(_op(f"{prefix}_down", "einsum", [("a", hidden), ("P_down", {"f": f, "d": d})], ("y", x)))
    return ops


def _norms(norm: str, count: int, rows) -> list[Op]:
    x = {"t": rows, "d": d}
    return [
        _op(f"{norm_name(norm)}_{i}", "elementwise", [("x", x), ("W_norm", {"d": d})], ("y", x), NORM_FLOPS[norm])
        for i in range(count)
    ]


def layer(norm: str, norms: int, gated: bool) -> list[Op]:
    """A layer's ``norms`` norms, its residual adds (one op; a layer runs two) and its dense feed-forward block."""
    x = {"t": t, "d": d}
    return [
        *_norms(norm, norms, t),
        _op("residuals", "elementwise", [("x", x), ("a", x)], ("y", x), 1),
        *_ffn(gated, "ffn"),
    ]


def ffn(gated: bool, prefix: str, gate: bool = False) -> list[Op]:
    """A feed-forward block (``prefix``: the ops' names), and the sigmoid gate of a model's shared experts."""
    ops = _ffn(gated, prefix)
    if gate:
        ops.append(
            _op("shared_gate", "einsum", [("x", {"t": t, "d": d}), ("W_sg", {"d": d, "e": 1})], ("s", {"t": t, "e": 1}))
        )
    return ops


def moe(gated: bool) -> list[Op]:
    """The routed part of a mixture-of-experts block over ``t`` tokens (see the module docstring)."""
    up = (2 if gated else 1) * c
    return [
        _op("router", "einsum", [("x", {"t": t, "d": d}), ("W_router", {"d": d, "e": e})], ("s", {"t": t, "e": e})),
        _op("router_softmax", "elementwise", [("s", {"t": t, "e": e})], ("p", {"t": t, "e": e}), SOFTMAX_FLOPS),
        _op(
            "experts_gate_up",
            "grouped",
            [("x", {"r": r, "d": d}), ("P_up", {"u": u, "d": d, "f": up})],
            ("h", {"r": r, "f": up}),
        ),
        # a kernel whose buffers span all v routed rows writes zeros for the v - r routed to other devices
        _op("experts_zero_fill", "copy", [], ("0", {"v": v - r, "f": up + d})),
        _op("experts_act", "elementwise", [("h", {"v": v, "f": up})], ("a", {"v": v, "c": c}), ACT_FLOPS[gated]),
        _op(
            "experts_down",
            "grouped",
            [("a", {"r": r, "c": c}), ("P_down", {"u": u, "c": c, "d": d})],
            ("y", {"r": r, "d": d}),
        ),
        # a multiply and an add per element of each of a token's top rows
        _op("experts_combine", "elementwise", [("y", {"v": v, "d": d})], ("z", {"t": t, "d": d}), 2 * top),
    ]


def head(norm: str) -> list[Op]:
    """Embedding lookup of the ``t`` new tokens, final norm and output projection of the ``o`` last positions."""
    x_in, x_out = {"t": t, "d": d}, {"t": o, "d": d}  # index t: the rows of each op
    return [
        _op("embed", "copy", [("E[tokens]", x_in)], ("x", x_in)),
        _op(
            f"final_{norm_name(norm)}",
            "elementwise",
            [("x", x_out), ("W_norm", {"d": d})],
            ("y", x_out),
            NORM_FLOPS[norm],
        ),
        _op("lm_head", "einsum", [("x", x_out), ("W_out", {"d": d, "w": w})], ("logits", {"t": o, "w": w})),
    ]


def rope() -> list[Op]:
    """Rotary embeddings of the new q and k, in place: q and k read and written, one cos/sin row per token read."""
    qk = {"t": t, "j": j, "p": p}
    return [_op("rope", "elementwise", [("qk", qk), ("cos_sin", {"t": t, "p": p})], ("qk", qk), ROPE_FLOPS)]


def cross_kv() -> list[Op]:
    """The cross-attention keys and values of ``t`` source tokens, projected once at prefill."""
    kv = {"t": t, "d": d}
    return [
        _op(name, "einsum", [("M", kv), ("P", {"d": d, "g": g, "k": k})], ("KV", {"t": t, "g": g, "k": k}))
        for name in ("cross_k_proj", "cross_v_proj")
    ]


def kv_write() -> list[Op]:
    """A prompt's new keys and values written into the paged cache by a kernel of their own (vLLM's
    ``reshape_and_cache_flash`` where its attention call does not write them): ``t`` tokens of ``g`` key/value
    heads, ``k`` key and value elements each, read and written (the cache side at the cache's width)."""
    kv = {"t": t, "g": g, "k": k}
    return [_op("kv_write", "copy", [("kv_new", kv)], ("cache_kv", kv))]


#: Each block's builder and the dimensions its compiled function takes, in order.
BLOCKS = {
    "layer": (layer, (t, d, f)),
    "ffn": (ffn, (t, d, f)),
    "moe": (moe, (t, d, e, r, u, c, top, v)),
    "head": (head, (t, o, d, w)),
    "rope": (rope, (t, j, p)),
    "cross_kv": (cross_kv, (t, d, g, k)),
    "kv_write": (kv_write, (t, g, k)),
}
