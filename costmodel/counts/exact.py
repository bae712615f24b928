"""Exact symbolic FLOP and memory counts of attention programs.

:func:`derive` is the entry point: it builds the program of a variant and mode, takes each op's
counts from its shapes (see :mod:`costmodel.counts.program`), sums the decode step over ``n`` steps in
``generate`` mode, optionally substitutes numbers for some dimensions, and returns a
:class:`CostReport` whose expressions are exact sympy expressions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import sympy

from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.core.vocab import MAX_DIM, MLA_FORMS, check_divisible, choice, dtype_bytes
from costmodel.counts import symbols as S
from costmodel.counts.ops import ELEMENTWISE_FLOPS
from costmodel.counts.program import STEP, Program, build_program

#: Dimensions that can be given numbers (``g`` comes from the variant and ``groups``).
NUMERIC_DIMS: tuple[str, ...] = ("b", "n", "m", "d", "h", "k", "v")
#: The dimensions of multi-head latent attention (:mod:`costmodel.counts.mla`).
MLA_DIMS: tuple[str, ...] = ("b", "n", "m", "d", "h", "k", "v", "c", "p", "l")


@dataclass(frozen=True)
class OpCost:
    """Exact counts of one op. ``bytes`` = ``memory_elements`` x bytes per element of the dtype."""

    name: str
    kind: str
    einsum: str | None
    flops: sympy.Expr
    memory_elements: sympy.Expr
    bytes: sympy.Expr

    @property
    def intensity(self) -> sympy.Expr:
        """Arithmetic intensity, FLOPs per byte."""
        return sympy.cancel(self.flops / self.bytes)


@dataclass(frozen=True)
class CostReport:
    """Per-op and total counts of one program, with the conventions and substitutions used."""

    variant: str
    mode: str
    dtype: str
    kv_heads: sympy.Expr
    ops: tuple[OpCost, ...]
    assumptions: tuple[str, ...]
    substitutions: Mapping[str, int] = field(default_factory=dict)
    form: str | None = None  # MLA's form (absorbed or naive)

    @cached_property
    def flops(self) -> sympy.Expr:
        return sympy.expand(sympy.Add(*(op.flops for op in self.ops)))

    @cached_property
    def memory_elements(self) -> sympy.Expr:
        return sympy.expand(sympy.Add(*(op.memory_elements for op in self.ops)))

    @cached_property
    def bytes(self) -> sympy.Expr:
        return sympy.expand(sympy.Add(*(op.bytes for op in self.ops)))

    @property
    def ratio(self) -> sympy.Expr:
        """Memory accesses (elements) per arithmetic operation: the paper's figure of merit."""
        return self.memory_elements / self.flops

    @property
    def intensity(self) -> sympy.Expr:
        """FLOPs per byte of the whole program."""
        return self.flops / self.bytes

    def __str__(self) -> str:
        from costmodel.render.text import table

        return table(self)

    def model_dump(self) -> dict:
        """JSON-ready dict; every expression is a string that ``sympy.sympify`` parses back."""
        return {
            "variant": self.variant,
            **({"form": self.form} if self.form else {}),
            "mode": self.mode,
            "dtype": self.dtype,
            "kv_heads": str(self.kv_heads),
            "ops": [
                {
                    "name": op.name,
                    "einsum": op.einsum,
                    "flops": str(op.flops),
                    "memory_elements": str(op.memory_elements),
                    "bytes": str(op.bytes),
                }
                for op in self.ops
            ],
            "total": {
                "flops": str(self.flops),
                "memory_elements": str(self.memory_elements),
                "bytes": str(self.bytes),
                "ratio": str(self.ratio),
            },
            "assumptions": list(self.assumptions),
        }


def derive(
    variant: str,
    mode: str,
    *,
    groups: int | None = None,
    dtype: str = "bf16",
    dims: Mapping[str, int] | None = None,
    cache_append: str = "inplace",
    execution: str = "unfused",
    simplify: bool = True,
    form: str = "absorbed",
    q_lora: bool = False,
) -> CostReport:
    """Exact counts of ``variant`` (mha, mqa, gqa, or mla) in ``mode``.

    MLA (:mod:`costmodel.counts.mla`) takes ``form`` (absorbed or naive) and ``q_lora`` (queries through a
    latent of rank l) and has the dimensions c, p and l besides b, n, m, d, h, k, v.

    ``dims`` maps some of b, n, m, d, h, k, v to positive integers; the rest stay symbolic. When d and h
    are given and k or v is not, it defaults to d / h. ``simplify=False`` skips factoring the
    expressions for display (the numeric path does not need it).

    >>> r = derive("mqa", "incremental", dims={"b": 1})
    >>> r.ops[0].einsum, r.ops[0].flops
    ('bd,hdk->bhk', 2*d*h*k)
    """
    checks.text("variant", variant)
    checks.text("dtype", dtype)
    checks.flag("simplify", simplify)
    checks.flag("q_lora", q_lora)
    form = choice("mla form", form, MLA_FORMS)
    if dims is not None and not isinstance(dims, Mapping):
        raise CostModelError(f"dims must be a mapping of dimension names to integers, got {dims!r}"[:200])
    dtype_bytes(dtype)  # an unknown dtype is an error before the program is built
    if variant.lower() == "mla":
        program = _mla_program(mode, form, q_lora, groups, cache_append, execution)
    else:
        program = build_program(variant, mode, groups=groups, cache_append=cache_append, execution=execution)
    return program_counts(program, dtype, dims, simplify)


def program_counts(
    program: Program, dtype: str = "bf16", dims: Mapping[str, int] | None = None, simplify: bool = True
) -> CostReport:
    """The exact counts of a built program (:func:`derive` builds it from a variant and mode)."""
    width = dtype_bytes(dtype)
    mode = program.mode
    subs = _check_dims(program, dims or {})
    ops = []
    for op in program.ops:
        flops, mem = op.flops, op.memory_elements
        if program.summed_over_steps:
            flops, mem = sum_steps(flops), sum_steps(mem)
        finish = _finish if simplify else lambda e, s: e.subs(s)
        flops, mem = finish(flops, subs), finish(mem, subs)
        ops.append(OpCost(op.name, op.kind, op.einsum, flops, mem, finish(mem * width, {})))
    return CostReport(
        variant=program.variant,
        mode=mode,
        dtype=dtype.lower(),
        kv_heads=program.kv_heads,
        ops=tuple(ops),
        assumptions=conventions(program, dtype.lower(), width, subs),
        substitutions={str(s): int(val) for s, val in subs.items()},
        form=program.form,
    )


def _mla_program(mode: str, form: str, q_lora: bool, groups, cache_append: str, execution: str) -> Program:
    from costmodel.counts.mla import build_mla_program

    if groups is not None:
        raise CostModelError(f"groups {groups} is only valid with variant gqa (mla caches one latent for all heads)")
    if cache_append != "inplace":
        raise CostModelError("mla appends its latent in place; cache append 'concat' applies to mha, gqa and mqa")
    return build_mla_program(mode, form, q_lora=q_lora, execution=execution)


@lru_cache(maxsize=1024)
def sum_steps(expr: sympy.Expr) -> sympy.Expr:
    """Sum a decode step's count over i = 0 .. n-1 cached positions, in closed form (kept for the process: the
    expressions are immutable, and a page or a server asks for the same program again and again)."""
    return sympy.summation(expr.subs(S.m, STEP), (STEP, 0, S.n - 1))


def _finish(expr: sympy.Expr, subs: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    return _finished(expr, tuple(sorted(subs.items(), key=lambda kv: str(kv[0]))))


@lru_cache(maxsize=4096)
def _finished(expr: sympy.Expr, subs: tuple) -> sympy.Expr:
    """``expr`` with ``subs`` substituted, expanded and factored for display (kept for the process)."""
    return sympy.factor(sympy.expand(expr.subs(dict(subs))))


def _check_dims(program: Program, dims: Mapping[str, int]) -> dict[sympy.Symbol, sympy.Expr]:
    subs: dict[sympy.Symbol, sympy.Expr] = {}
    valid = MLA_DIMS if program.variant == "mla" else NUMERIC_DIMS
    for name, value in dims.items():
        if name not in valid:
            raise CostModelError(f"unknown dimension {name!r}; valid dimensions are {', '.join(valid)}")
        least = 0 if name == "m" else 1  # m = 0: the first decode step, with an empty cache
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_DIM:
            raise CostModelError(f"dimension {name} must be an integer from {least} to {MAX_DIM}, got {value!r}")
        subs[S.SYMBOLS[name]] = sympy.Integer(value)
    if program.mode == "generate" and S.m in subs:
        raise CostModelError(
            "the context m does not apply in generate mode (it starts from an empty cache); "
            "use incremental mode for one step after m cached positions"
        )
    heads = dims.get("h")
    if heads is not None and program.kv_heads.is_Integer:
        check_divisible(heads, int(program.kv_heads))
    if heads is not None and "d" in dims and program.variant != "mla":
        for name in ("k", "v"):
            if name not in dims:
                if dims["d"] % heads:
                    raise CostModelError(
                        f"d_model {dims['d']} is not divisible by heads {heads}; "
                        f"give the per-head dimension {name} explicitly"
                    )
                subs[S.SYMBOLS[name]] = sympy.Integer(dims["d"] // heads)
    return subs


def conventions(program: Program, dtype: str, width: int, subs: Mapping) -> tuple[str, ...]:
    """The counting conventions and assumptions behind a report, in words."""
    ew = ", ".join(f"{name} {f}" for name, f in ELEMENTWISE_FLOPS.items())
    lines = [
        "einsum FLOPs = 2 x product of all index sizes (a multiply and an add per term, "
        "as torch FlopCounterMode counts)",
        f"elementwise FLOPs per output element: {ew}",
        "memory: every op reads each operand and writes its output once"
        + (
            " (unfused: intermediates go through memory)"
            if program.execution == "unfused"
            else "; fused attention reads q, K, V once and writes o (logits and weights stay on chip, mask made in kernel)"
        ),
        f"bytes = memory elements x {width} ({dtype})",
    ]
    if program.mode in ("incremental", "generate"):
        how = (
            "in place: only the new position is written"
            if program.cache_append == "inplace"
            else "by concatenation: the whole cache is read and written again (tf.concat)"
        )
        lines.append(f"KV-cache append {how}")
    if program.mode == "generate":
        lines.append("generate: the decode step summed over i = 0..n-1 cached positions (empty cache at start)")
    if program.mode == "dot-product":
        lines.append("dot-product: a single head on one query; the variant does not apply")
    if program.mode == "batched":
        lines.append("mask: the paper's additive mask of shape [b, h, n, m], read from memory")
    if program.variant == "mla":
        lines.append(
            f"multi-head latent attention (DeepSeek-V2), {program.form} form: a cache row is one latent of rank c "
            "plus one rotary key of p dimensions, shared by all h heads; "
            + (
                "per-head keys (k + p) and values (v) are materialised from the cached latents"
                if program.form == "naive"
                else "the key and value up-projections are absorbed into the query and the output, so attention "
                "runs over the cache rows (multi-query attention with key dimension c + p, value dimension c)"
            )
        )
        lines.append("norms of the latents: RMSNorm, 4 FLOPs per element; rotary embeddings are not in the program")
    if program.kv_heads == S.g:
        lines.append("g key/value heads, g divides h")
    if not {S.k, S.v} <= set(subs) and program.variant != "mla":
        lines.append("k and v are free; the paper's setting is k = v = d/h")
    return tuple(lines)
