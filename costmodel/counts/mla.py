"""Multi-head latent attention (MLA, DeepSeek-V2 2024, Section 2.1) as a program of ops.

MLA caches one latent vector of rank ``c`` per position, shared by all ``h`` heads, plus one decoupled
rotary key of ``p`` dimensions; the per-head keys (``k`` dimensions without rotation) and values (``v``)
are up-projections of the latent. Queries are projected from ``x`` directly, or through a query latent
of rank ``l`` (``q_lora``). Two forms compute the same outputs:

* **naive**: materialise every head's keys and values from the cached latents (one GEMM over all
  cached positions), concatenate the rotary key to every head, and run multi-head attention with key
  dimension ``k + p`` and value dimension ``v``.
* **absorbed**: fold the key up-projection into the query (``q_k W_UK`` is a query in latent space) and the
  value up-projection after the weighted sum (``(a C) W_UV``), so attention runs over the cache itself:
  multi-query attention with key dimension ``c + p`` and value dimension ``c``.

Index letters: ``e = k + p`` (query and key dimension per head), ``f = c + p`` (one cache row),
``j = k + v`` (a head's up-projected key and value). A name ``T:part`` is a view of a part of ``T``
(``KV:c`` is the latent part of the cache rows; ``P_kvb:k`` the key half of the up-projection).
Norms are RMSNorms (4 FLOPs per element, as the model ops count them); rotary embeddings of ``q`` and the
new rotary key are the engine's op (:func:`costmodel.model.ops.engine_ops`), as for grouped-query models.
"""

from __future__ import annotations

import sympy

from costmodel.core.vocab import EXECUTIONS, choice
from costmodel.core.vocab import MLA_FORMS as FORMS
from costmodel.counts import symbols as S
from costmodel.counts.ops import ELEMENTWISE_FLOPS, Op, Tensor
from costmodel.counts.program import Program, fuse_attention

#: FLOPs per element of an RMSNorm (square, sum, scale, weight), as :data:`costmodel.counts.step_program.NORM_FLOPS`.
RMS_FLOPS = 4
#: The arguments of an MLA program's compiled function.
ARGS = (S.b, S.n, S.m, S.d, S.h, S.k, S.v, S.c, S.p, S.l)


def _sizes(memory: sympy.Expr) -> dict[str, sympy.Expr]:
    return {
        "b": S.b,
        "n": S.n,
        "m": memory,
        "d": S.d,
        "h": S.h,
        "k": S.k,
        "v": S.v,
        "c": S.c,
        "p": S.p,
        "l": S.l,
        "e": S.k + S.p,
        "f": S.c + S.p,
        "j": S.k + S.v,
    }


def build_mla_program(
    mode: str, form: str = "absorbed", *, q_lora: bool = False, execution: str = "unfused"
) -> Program:
    """The MLA program of one decode step (``incremental``: x [b, d] appends one latent to a cache of m
    positions and attends to m + 1) or of batched attention (``batched``: X [b, n, d] over the latents of
    M [b, m, d], with the paper's [b, h, n, m] mask), in the ``naive`` or ``absorbed`` form; ``generate``
    is the decode step summed over i = 0 .. n-1 cached positions, as for grouped-query programs."""
    from costmodel.core.checks import flag

    flag("q_lora", q_lora)
    mode = choice("mode for mla", mode, ("batched", "incremental", "generate"))
    form = choice("mla form", form, FORMS)
    execution = choice("execution", execution, EXECUTIONS)
    decode = mode != "batched"
    sz = _sizes(S.m + 1 if decode else S.m)
    T = lambda name, idx: Tensor(name, idx, tuple(sz[i] for i in idx))  # noqa: E731
    Q = "" if decode else "n"
    x = T("x" if decode else "X", "b" + Q + "d")
    ops = _projections(T, x, Q, decode, q_lora)
    logits = T("logits", "bh" + Q + "m")
    if form == "naive":
        ops += [
            Op("kv_up", "einsum", (T("KV:c", "bmc"), T("P_kvb", "chj")), T("KVup", "bhmj")),
            Op("k_concat", "copy", (T("KVup:k", "bhmk"), T("KV:p", "bmp")), T("K", "bhme")),
            Op("logits", "einsum", (T("q", "bh" + Q + "e"), T("K", "bhme")), logits),
        ]
        value = T("KVup:v", "bhmv")
    else:
        ops += [
            Op("q_absorb", "einsum", (T("q:k", "bh" + Q + "k"), T("P_kvb:k", "chk")), T("q_cat:c", "bh" + Q + "c")),
            Op("logits", "einsum", (T("q_cat", "bh" + Q + "f"), T("KV", "bmf")), logits),
        ]
        value = T("KV:c", "bmc")
    ops.append(Op("scale", "elementwise", (logits,), logits, ELEMENTWISE_FLOPS["scale"]))
    if not decode:
        ops.append(Op("mask", "elementwise", (logits, T("mask", logits.indices)), logits, ELEMENTWISE_FLOPS["mask"]))
    weights = T("weights", logits.indices)
    ops.append(Op("softmax", "elementwise", (logits,), weights, ELEMENTWISE_FLOPS["softmax"]))
    if form == "naive":
        ops.append(Op("weighted_sum", "einsum", (weights, value), T("o", "bh" + Q + "v")))
    else:
        ops += [
            Op("weighted_sum", "einsum", (weights, value), T("o_latent", "bh" + Q + "c")),
            Op("v_absorb", "einsum", (T("o_latent", "bh" + Q + "c"), T("P_kvb:v", "chv")), T("o", "bh" + Q + "v")),
        ]
    ops.append(Op("out_proj", "einsum", (T("o", "bh" + Q + "v"), T("P_o", "hvd")), T("y", "b" + Q + "d")))
    if execution == "fused":
        ops = fuse_attention(ops)
    return Program(
        variant="mla",
        mode=mode,
        kv_heads=sympy.Integer(1),
        ops=tuple(ops),
        execution=execution,
        cache_names=("KV",),
        form=form,
    )


def _projections(T, x, Q: str, decode: bool, q_lora: bool) -> list[Op]:
    """The queries (through a latent with ``q_lora``) and the latents: one new position's appended to the cache when
    decoding, every memory position's in batched attention (``T``: a tensor of the program's sizes)."""
    ops: list[Op] = []
    if q_lora:
        ops += [
            Op("q_down", "einsum", (x, T("P_qa", "dl")), T("q_latent", "b" + Q + "l")),
            Op(
                "q_norm",
                "elementwise",
                (T("q_latent", "b" + Q + "l"), T("W_qnorm", "l")),
                T("q_latent", "b" + Q + "l"),
                RMS_FLOPS,
            ),
            Op("q_proj", "einsum", (T("q_latent", "b" + Q + "l"), T("P_qb", "lhe")), T("q", "bh" + Q + "e")),
        ]
    else:
        ops.append(Op("q_proj", "einsum", (x, T("P_q", "dhe")), T("q", "bh" + Q + "e")))
    if decode:  # the new position's latent and rotary key, normed and appended to the cache
        ops += [
            Op("kv_down", "einsum", (x, T("P_kva", "df")), T("kv_new", "bf")),
            Op("kv_norm", "elementwise", (T("kv_new:c", "bc"), T("W_kvnorm", "c")), T("kv_new:c", "bc"), RMS_FLOPS),
            Op("kv_append", "copy", (T("kv_new", "bf"),), T("KV[m]", "bf")),
        ]
    else:  # the latents of all m memory positions
        ops += [
            Op("kv_down", "einsum", (T("M", "bmd"), T("P_kva", "df")), T("KV", "bmf")),
            Op("kv_norm", "elementwise", (T("KV:c", "bmc"), T("W_kvnorm", "c")), T("KV:c", "bmc"), RMS_FLOPS),
        ]
    return ops


def mla_attention_dims(dims: dict, form: str) -> dict:
    """The grouped-query attention a form's attention kernel runs: naive is multi-head attention with key
    dimension k + p and value dimension v; absorbed is multi-query attention over the cache rows (key
    dimension c + p, value dimension c)."""
    if form == "naive":
        return {**dims, "g": dims["h"], "k": dims["k"] + dims["p"]}
    return {**dims, "g": 1, "k": dims["c"] + dims["p"], "v": dims["c"]}
