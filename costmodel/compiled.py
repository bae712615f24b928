"""A program's exact counts compiled once into one numpy-ready function with named outputs.

:func:`compile_program` derives the per-op counts of :mod:`costmodel.counts` and the resident weights and
KV cache of :meth:`costmodel.program.Program.resident_elements`, and prints them as plain Python
arithmetic, so a prediction, a sweep over a million points and a whole model all evaluate the same
expressions, on Python numbers or numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sympy

from costmodel import symbols as S
from costmodel.counts import derive
from costmodel.program import build_program, gemm_dims, op_class

#: The arguments of every compiled function, in order.
ARGS = (S.b, S.n, S.m, S.d, S.h, S.g, S.k, S.v)


@dataclass(frozen=True)
class Compiled:
    """A program's ops and one function of (b, n, m, d, h, g, k, v) that returns, in order, every op's
    FLOPs, every op's memory elements, the weight elements and the KV-cache elements."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]  # the op class of each op (costmodel.program.op_class)
    einsums: tuple[str | None, ...]
    gemms: tuple[tuple[sympy.Expr, ...] | None, ...]  # (batch, M, K, N) of each einsum, symbolic
    counts: object
    gemm_counts: object = None  # (batch, M, K, N) of every einsum, flattened, as one numeric function

    def evaluate(self, args) -> tuple[list, list, object, object]:
        """(flops per op, elements per op, weight elements, cache elements) at ``args``."""
        values = self.counts(*args)
        n = len(self.names)
        return values[:n], values[n:2 * n], values[2 * n], values[2 * n + 1]

    def at(self, dims: dict[str, int]) -> tuple[list, list, object, object]:
        """:meth:`evaluate` at named dimensions (``{"b": 1, "m": 4096, ...}``)."""
        return self.evaluate([dims[s.name] for s in ARGS])

    def resident(self, dims: dict[str, int]) -> tuple[int, int]:
        """(weight elements, KV-cache elements) of one layer at ``dims``: the program's resident tensors."""
        _, _, weights, cache = self.at(dims)
        return weights, cache

    def bias_elements(self, dims: dict[str, int]) -> int:
        """Elements of the projections' biases at ``dims`` (for models with biases)."""
        return self.counts(*[dims[s.name] for s in ARGS])[-1]

    def gemm_shapes(self, dims: dict) -> list[dict | None]:
        """``{"batch", "M", "K", "N"}`` of every einsum op at ``dims`` (numbers or numpy arrays; ``None``
        for the other ops), the shapes the GEMM tile mechanism needs."""
        values = iter(self.gemm_counts(*[dims[s.name] for s in ARGS]))
        return [dict(zip(("batch", "M", "K", "N"), (next(values) for _ in range(4)))) if g else None
                for g in self.gemms]


@lru_cache(maxsize=64)
def compile_program(variant: str, mode: str, execution: str = "unfused", cache_append: str = "inplace") -> Compiled:
    """The program's exact counts, compiled once into a single numpy function."""
    report = derive(variant, mode, execution=execution, cache_append=cache_append, simplify=False)
    program = build_program(variant, mode, cache_append=cache_append, execution=execution)
    weights, cache = program.resident_elements()
    gemms = tuple(gemm_dims(o) if o.kind == "einsum" else None for o in program.ops)
    exprs = [o.flops for o in report.ops] + [o.memory_elements for o in report.ops] + [weights, cache,
                                                                                      program.bias_elements()]
    return Compiled(
        names=tuple(o.name for o in report.ops), kinds=tuple(op_class(o, mode) for o in program.ops),
        einsums=tuple(o.einsum for o in report.ops),
        gemms=gemms, counts=_numeric_function(exprs),
        gemm_counts=_numeric_function([x for g in gemms if g for x in g] or [sympy.Integer(0)]),
    )


def _numeric_function(exprs: list[sympy.Expr]):
    """One Python function of ARGS returning every expression; works on ints, floats and numpy arrays.

    The counts are polynomials (with rational coefficients) in the dimensions, so their printed form is
    plain Python arithmetic; this is what ``sympy.lambdify`` would generate, without its start-up cost.
    """
    for e in exprs:
        extra = e.free_symbols - set(ARGS)
        if extra or any(not (a.is_Add or a.is_Mul or a.is_Pow or a.is_Symbol or a.is_Number)
                        for a in sympy.preorder_traversal(e)):
            return sympy.lambdify(ARGS, exprs, modules="numpy")
    body = ", ".join(f"({sympy.sstr(e)})" for e in exprs)
    return eval(f"lambda {', '.join(s.name for s in ARGS)}: [{body}]")  # noqa: S307 - our own expressions
