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
from costmodel.counts import program_counts
from costmodel.program import Program, build_program, gemm_dims, op_class

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
    args: tuple = ARGS  # the dimensions the functions take, in order
    storage_counts: object = None  # weight elements of every op, then cache elements of every op

    def _args(self, dims: dict) -> list:
        return [dims[s.name] for s in self.args]

    def evaluate(self, args) -> tuple[list, list, object, object]:
        """(flops per op, elements per op, weight elements, cache elements) at ``args``."""
        values = self.counts(*args)
        n = len(self.names)
        return values[:n], values[n:2 * n], values[2 * n], values[2 * n + 1]

    def at(self, dims: dict[str, int]) -> tuple[list, list, object, object]:
        """:meth:`evaluate` at named dimensions (``{"b": 1, "m": 4096, ...}``)."""
        return self.evaluate(self._args(dims))

    def resident(self, dims: dict[str, int]) -> tuple[int, int]:
        """(weight elements, KV-cache elements) of one layer at ``dims``: the program's resident tensors."""
        _, _, weights, cache = self.at(dims)
        return weights, cache

    def bias_elements(self, dims: dict[str, int]) -> int:
        """Elements of the projections' biases at ``dims`` (for models with biases)."""
        return self.counts(*self._args(dims))[-1]

    def gemm_shapes(self, dims: dict) -> list[dict | None]:
        """``{"batch", "M", "K", "N"}`` of every einsum op at ``dims`` (numbers or numpy arrays; ``None``
        for the other ops), the shapes the GEMM tile mechanism needs."""
        values = iter(self.gemm_counts(*self._args(dims)))
        return [dict(zip(("batch", "M", "K", "N"), (next(values) for _ in range(4)))) if g else None
                for g in self.gemms]


    def storage(self, dims: dict) -> tuple[list, list]:
        """(weight elements, KV-cache elements) each op reads or writes at ``dims``: the parts of its memory
        traffic stored in the weight and the cache dtypes (the rest is in the activation dtype)."""
        values = self.storage_counts(*self._args(dims))
        n = len(self.names)
        return values[:n], values[n:]


@lru_cache(maxsize=64)
def compile_program(variant: str, mode: str, execution: str = "unfused", cache_append: str = "inplace",
                    form: str = "absorbed", q_lora: bool = False) -> Compiled:
    """The program's exact counts, compiled once into a single numpy function (``form`` and ``q_lora``
    choose the program of multi-head latent attention, :mod:`costmodel.mla`)."""
    if variant == "mla":
        from costmodel.mla import ARGS as args, build_mla_program

        program = build_mla_program(mode, form, q_lora=q_lora, execution=execution)
    else:
        args, program = ARGS, build_program(variant, mode, cache_append=cache_append, execution=execution)
    report = program_counts(program, simplify=False)  # the program built once, its counts from it
    weights, cache = program.resident_elements()
    gemms = tuple(gemm_dims(o) if o.kind == "einsum" else None for o in program.ops)
    exprs = [o.flops for o in report.ops] + [o.memory_elements for o in report.ops] + [weights, cache,
                                                                                      program.bias_elements()]
    # projection weights are stored in the weight dtype; norm weights (W_*) stay in the activation dtype
    stored = [_stored(o, program, lambda t: t.name.startswith("P_")) for o in program.ops]
    stored += [_stored(o, program, lambda t: _is_cache(t, program)) for o in program.ops]
    if program.summed_over_steps:
        from costmodel.counts import _sum_steps

        stored = [_sum_steps(e) for e in stored]
    return Compiled(
        names=tuple(o.name for o in report.ops), kinds=tuple(op_class(o, mode) for o in program.ops),
        einsums=tuple(o.einsum for o in report.ops),
        gemms=gemms, counts=_numeric_function(exprs, args),
        gemm_counts=_numeric_function([x for g in gemms if g for x in g] or [sympy.Integer(0)], args),
        args=args, storage_counts=_numeric_function(stored, args),
    )


def _is_cache(tensor, program: Program) -> bool:
    """A KV-cache tensor (or a view or position of one, or the previous cache a concatenation copies)."""
    base = tensor.name.removeprefix("prev_").split(":")[0].split("[")[0]
    return base in program.cache_names


def _stored(op, program: Program, kind) -> sympy.Expr:
    """Elements of an op's operands (a fused op's: its inputs and output) for which ``kind`` holds."""
    return sympy.Add(*(t.elements for t in (*op.inputs, op.output) if kind(t)))


def _numeric_function(exprs: list[sympy.Expr], args: tuple = ARGS):
    """One Python function of ARGS returning every expression; works on ints, floats and numpy arrays.

    The counts are polynomials (with rational coefficients) in the dimensions, so their printed form is
    plain Python arithmetic; this is what ``sympy.lambdify`` would generate, without its start-up cost.
    """
    for e in exprs:
        extra = e.free_symbols - set(args)
        if extra or any(not (a.is_Add or a.is_Mul or a.is_Pow or a.is_Symbol or a.is_Number)
                        for a in sympy.preorder_traversal(e)):
            return sympy.lambdify(args, exprs, modules="numpy")
    body = ", ".join(f"({sympy.sstr(e)})" for e in exprs)
    return eval(f"lambda {', '.join(s.name for s in args)}: [{body}]")  # noqa: S307 - our own expressions
