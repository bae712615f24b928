"""Attention as programs of ops over named symbolic dimensions.

One generic grouped-query attention program covers every variant: ``h`` query heads share ``g``
key/value heads, so a query head is the pair ``(g, r)`` with ``r = h / g`` query heads per key/value
head. Multi-head attention is ``g = h`` and multi-query attention is ``g = 1`` (Shazeer 2019, Section 3);
nothing else differs between the variants.

An op's costs are derived from its operands' shapes, never typed per op:

* **einsum**: FLOPs = 2 x the product of the sizes of all its indices (a multiply and an add per term,
  torch's ``FlopCounterMode`` convention); memory = elements of every operand read + elements of the
  output written.
* **elementwise** (scale, mask add, softmax): FLOPs = a stated count per output element (1 for scale and
  mask add; 5 for softmax: max, subtract, exp, sum, divide); memory = inputs read once + output
  written once, i.e. a single-pass kernel per op.
* **copy** (the KV-cache append): no FLOPs; memory = elements read + elements written. ``inplace``
  writes only the new position into a preallocated cache; ``concat`` is what the paper's
  ``tf.concat`` does: the whole cache is read and written again every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from costmodel.core.vocab import (
    CACHE_APPENDS,
    EXECUTIONS,
    MODES,
    VARIANTS,
    CacheAppend,
    Execution,
    Mode,
    Variant,
    check_groups,
    choice,
)
from costmodel.counts import symbols as S
from costmodel.counts.ops import ELEMENTWISE_FLOPS, Op, Tensor, bias_elements, is_weight

#: The ops a flash-style kernel runs on chip: logits and weights never reach memory.
FUSED_ATTENTION_OPS = ("logits", "scale", "mask", "softmax", "weighted_sum")


#: Summation index of ``generate`` mode: step ``i`` has ``i`` cached positions.
STEP = sympy.Symbol("i", integer=True, nonnegative=True)


@dataclass(frozen=True)
class Program:
    """A sequence of ops. ``generate`` programs hold one decode step summed over ``i = 0 .. n-1``."""

    variant: Variant
    mode: Mode
    kv_heads: sympy.Expr
    ops: tuple[Op, ...]
    cache_append: CacheAppend = "inplace"
    execution: Execution = "unfused"
    cache_names: tuple[str, ...] = ("K", "V")  # the tensors that hold the cache
    form: str | None = None  # MLA: "naive" or "absorbed" (costmodel.counts.mla)

    @property
    def summed_over_steps(self) -> bool:
        return self.mode == "generate"

    def resident_elements(self) -> tuple[sympy.Expr, sympy.Expr]:
        """(weight elements, KV-cache elements) that stay in device memory, from the program's tensors.

        Weights are the distinct ``P_*`` projections; the cache is the K and V tensors attention reads
        (m + 1 positions after a decode step's append; n positions after ``generate``).
        """
        tensors = {t.name: t for op in _flatten(self.ops) for t in (*op.inputs, op.output)}
        weights = sympy.Add(*(t.elements for t in tensors.values() if is_weight(t)))
        # a cache read only through views (``KV:c``, ``KV:p``) is the sum of its disjoint views
        cache = sympy.Add(
            *(
                tensors[name].elements
                if name in tensors
                else sympy.Add(*(t.elements for key, t in tensors.items() if key.startswith(name + ":")))
                for name in self.cache_names
            )
        )
        if self.summed_over_steps:
            cache = cache.subs(S.m, S.n - 1)
        return weights, cache

    def bias_elements(self) -> sympy.Expr:
        """Elements of the projections' biases, for models that have them (:func:`bias_elements`)."""
        return sympy.Add(*(bias_elements(op) for op in self.ops))


def _flatten(ops) -> list[Op]:
    return [p for op in ops for p in (op.parts or (op,))]


def op_class(op: Op, mode: str) -> str:
    """The class of kernel an op runs, for measured per-class rates: a projection (an einsum with a
    weight), an attention einsum (over K or V), elementwise, copy, or fused attention for a decode step
    or a prefill (different kernels: one query position against many)."""
    if op.kind == "einsum":
        return "projection" if any(t.name.startswith("P_") for t in op.inputs) else "attention"
    if op.kind == "fused":
        return "fused_prefill" if mode == "batched" else "fused_decode"
    return op.kind


def kv_heads(variant: str, groups: int | None = None) -> sympy.Expr:
    """Number of key/value heads: ``h`` for MHA, 1 for MQA, ``groups`` (or the symbol ``g``) for GQA."""
    variant = choice("variant", variant, VARIANTS)
    check_groups(variant, groups)
    if variant == "mha":
        return S.h
    if variant == "mqa":
        return sympy.Integer(1)
    return S.g if groups is None else sympy.Integer(groups)


def build_program(
    variant: str,
    mode: str,
    groups: int | None = None,
    cache_append: str = "inplace",
    execution: str = "unfused",
) -> Program:
    """The attention program of ``variant`` in ``mode``.

    ``batched``: X [b,n,d] attends to M [b,m,d] with a mask (Shazeer 2019, Section 2.3).
    ``incremental``: one decode step; x [b,d], m cached positions, the step appends one and attends to
    m + 1 (Section 2.4). ``generate``: that step for i = 0 .. n-1 cached positions (the paper's "across n
    calls"). ``single-query``: multi-head attention of one query vector x [d] over M [m,d] (Section 2.2).
    ``dot-product``: one head, one query q [k] over K [m,k], V [m,v] (Section 2.1).

    ``execution="fused"`` replaces logits .. weighted sum by one flash-style kernel (:func:`fuse_attention`).
    """
    from costmodel.core.checks import count

    variant = choice("variant", variant, VARIANTS)
    mode = choice("mode", mode, MODES)
    execution = choice("execution", execution, EXECUTIONS)
    count("groups", groups, optional=True)
    cache_append = choice("cache append", cache_append, CACHE_APPENDS)
    G = kv_heads(variant, groups)
    if mode == "dot-product":
        ops = _dot_product_ops()
    elif mode == "single-query":
        ops = _attention_ops(G, batch="", query="", from_cache=False)
    elif mode == "batched":
        ops = _attention_ops(G, batch="b", query="n", from_cache=False)
    else:  # incremental and generate share the decode step
        ops = _attention_ops(G, batch="b", query="", from_cache=True, cache_append=cache_append)
    if execution == "fused":
        ops = fuse_attention(ops)
    return Program(
        variant=variant, mode=mode, kv_heads=G, ops=tuple(ops), cache_append=cache_append, execution=execution
    )


def fuse_attention(ops: list[Op]) -> list[Op]:
    """One kernel for logits, scale, mask, softmax and weighted sum, as flash attention runs them.

    It reads q, K and V once (K and V with their g heads) and writes o; logits and weights stay on
    chip, and the mask is generated in the kernel (causal or padding), not read. Its FLOPs are those of
    the ops it replaces. Its inputs are those of its parts that no part writes, each tensor once (a view
    ``name:part`` of a tensor read in full is not read again).
    """
    parts = tuple(op for op in ops if op.name in FUSED_ATTENTION_OPS)
    first, last = parts[0], parts[-1]
    written = {op.output.name for op in parts}
    inputs: dict[str, Tensor] = {}
    for t in (t for op in parts for t in op.inputs):
        base = t.name.split(":")[0]
        if t.name not in written and t.name != "mask" and base not in inputs:
            inputs[base] = t
    fused = Op("attention", "fused", tuple(inputs.values()), last.output, parts=parts)
    at = ops.index(first)
    rest = [op for op in ops if op.name not in FUSED_ATTENTION_OPS]
    return rest[:at] + [fused] + rest[at:]


def _sizes(G: sympy.Expr, memory: sympy.Expr) -> dict[str, sympy.Expr]:
    # r = query heads per key/value head; g * r = h for every variant.
    return {"b": S.b, "n": S.n, "m": memory, "d": S.d, "h": S.h, "g": G, "r": S.h / G, "k": S.k, "v": S.v}


def _tensor(name: str, indices: str, sizes: dict[str, sympy.Expr]) -> Tensor:
    return Tensor(name, indices, tuple(sizes[i] for i in indices))


def _attention_ops(
    G: sympy.Expr, *, batch: str, query: str, from_cache: bool, cache_append: str = "inplace"
) -> list[Op]:
    """Projections, logits, scale, [mask], softmax, weighted sum, output projection.

    ``batch`` and ``query`` are the index letters in front of the per-head axes ("b"/"" and "n"/"").
    With ``from_cache`` the keys and values of the new position are projected from x and appended to a
    cache of m positions, and attention runs over m + 1 of them.
    """
    sz = _sizes(G, S.m + 1 if from_cache else S.m)
    T = lambda name, idx: _tensor(name, idx, sz)  # noqa: E731
    B, Q = batch, query
    x = T("x" if not Q else "X", B + Q + "d")
    ops = [Op("q_proj", "einsum", (x, T("P_q", "hdk")), T("q", B + "h" + Q + "k"))]
    if from_cache:
        # K/V of the new position only: (b, g, k) and (b, g, v)
        k_new, v_new = T("k_new", B + "gk"), T("v_new", B + "gv")
        ops += [
            Op("k_proj", "einsum", (x, T("P_k", "gdk")), k_new),
            Op("v_proj", "einsum", (x, T("P_v", "gdv")), v_new),
            _append("k_append", k_new, "K", "k", sz, cache_append),
            _append("v_append", v_new, "V", "v", sz, cache_append),
        ]
    else:
        mem = T("M", B + "md")
        ops += [
            Op("k_proj", "einsum", (mem, T("P_k", "gdk")), T("K", B + "gmk")),
            Op("v_proj", "einsum", (mem, T("P_v", "gdv")), T("V", B + "gmv")),
        ]
    logits = T("logits", B + "gr" + Q + "m")  # (b, g, r, n, m): query heads split as (g, r)
    ops += [
        Op("logits", "einsum", (T("q", B + "gr" + Q + "k"), T("K", B + "gmk")), logits),
        Op("scale", "elementwise", (logits,), logits, ELEMENTWISE_FLOPS["scale"]),
    ]
    if Q:  # the paper's batched program adds a mask of shape [b, h, n, m]
        ops.append(Op("mask", "elementwise", (logits, T("mask", logits.indices)), logits, ELEMENTWISE_FLOPS["mask"]))
    weights = T("weights", logits.indices)
    ops += [
        Op("softmax", "elementwise", (logits,), weights, ELEMENTWISE_FLOPS["softmax"]),
        Op("weighted_sum", "einsum", (weights, T("V", B + "gmv")), T("o", B + "gr" + Q + "v")),
        Op("out_proj", "einsum", (T("o", B + "h" + Q + "v"), T("P_o", "hdv")), T("y", B + Q + "d")),
    ]
    return ops


def _append(name: str, new: Tensor, cache: str, width: str, sz: dict, how: str) -> Op:
    """Write the new position into the cache: in place, or by concatenation (a full copy)."""
    if how == "inplace":
        return Op(name, "copy", (new,), Tensor(f"{cache}[m]", new.indices, new.shape))
    prev = _tensor(f"prev_{cache}", f"bgm{width}", {**sz, "m": S.m})
    return Op(name, "copy", (prev, new), _tensor(cache, f"bgm{width}", sz))


def _dot_product_ops() -> list[Op]:
    sz = _sizes(sympy.Integer(1), S.m)
    T = lambda name, idx: _tensor(name, idx, sz)  # noqa: E731
    logits = T("logits", "m")
    return [
        Op("logits", "einsum", (T("q", "k"), T("K", "mk")), logits),
        Op("scale", "elementwise", (logits,), logits, ELEMENTWISE_FLOPS["scale"]),
        Op("softmax", "elementwise", (logits,), T("weights", "m"), ELEMENTWISE_FLOPS["softmax"]),
        Op("weighted_sum", "einsum", (T("weights", "m"), T("V", "mv")), T("y", "v")),
    ]


__all__ = ["Program", "Variant", "Mode", "fuse_attention", "op_class", "STEP", "build_program", "kv_heads"]
