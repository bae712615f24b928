"""Ops and their operands, and what an op costs from its shapes alone (no symbolic algebra needed to import it).

* **einsum**: FLOPs = 2 x the product of the sizes of all its indices (a multiply and an add per term,
  torch's ``FlopCounterMode`` convention); memory = elements of every operand read + elements of the
  output written.
* **grouped**: a grouped matrix product (a mixture of experts' routed GEMM), FLOPs = 2 x rows x K x N.
* **elementwise**: a stated count of FLOPs per output element; memory = inputs read once + output written once.
* **copy**: no FLOPs; memory = elements read + elements written.
* **fused**: a flash-style kernel: its parts' FLOPs, its own operands' memory.

Sizes are sympy expressions (the attention programs of :mod:`costmodel.counts.program`, counted exactly and
symbolically) or numbers (a model step's ops at one shape, counted in plain arithmetic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

OpKind = Literal["einsum", "elementwise", "copy", "fused", "grouped"]


#: FLOPs per output element of each elementwise op (the convention stated in the module docstring).
ELEMENTWISE_FLOPS: dict[str, int] = {"scale": 1, "mask": 1, "softmax": 5}


@dataclass(frozen=True)
class Tensor:
    """An operand: a name, one index letter per axis, and the symbolic size of each axis."""

    name: str
    indices: str
    shape: tuple[object, ...]

    @property
    def elements(self) -> object:
        return _prod(self.shape)


def _prod(values):
    """A product of sizes: plain Python arithmetic where every size is a number (a model step's ops, priced at
    one shape), exact sympy arithmetic where some are symbols (the attention programs)."""
    values = tuple(values)
    if all(isinstance(v, (int, float)) for v in values):
        return math.prod(values)
    import sympy

    return sympy.Mul(*values)


def _sum(values):
    """A sum of counts, as :func:`_prod` multiplies them."""
    values = tuple(values)
    if all(isinstance(v, (int, float)) for v in values):
        return sum(values)
    import sympy

    return sympy.Add(*values)


@dataclass(frozen=True)
class Op:
    """One kernel of an attention program; its costs follow from the operand shapes alone.

    ``grouped``: a grouped matrix product (a mixture of experts' routed GEMM): rows of the first operand, each
    multiplied by one group's matrix of the second; the group axis (in the second operand only) is not summed
    over, so the FLOPs are 2 x rows x K x N, while every touched group's matrix is read."""

    name: str
    kind: OpKind
    inputs: tuple[Tensor, ...]
    output: Tensor
    flops_per_element: int = 0
    parts: tuple[Op, ...] = ()  # the ops a fused kernel runs on chip

    @property
    def einsum(self) -> str | None:
        """The einsum equation of an einsum op (``None`` for other kinds)."""
        if self.kind != "einsum":
            return None
        return ",".join(t.indices for t in self.inputs) + "->" + self.output.indices

    def index_sizes(self) -> dict[str, object]:
        """Size of every index letter; an index must have one size across all operands."""
        sizes: dict[str, object] = {}
        for tensor in (*self.inputs, self.output):
            for letter, size in zip(tensor.indices, tensor.shape, strict=True):
                if sizes.setdefault(letter, size) != size:
                    raise ValueError(f"op {self.name}: index {letter} has sizes {sizes[letter]} and {size}")
        return sizes

    @property
    def flops(self) -> object:
        if self.kind == "einsum":
            return 2 * _prod(self.index_sizes().values())
        if self.kind == "grouped":
            x, w = self.inputs
            group = set(w.indices) - set(x.indices) - set(self.output.indices)
            return 2 * _prod(size for letter, size in self.index_sizes().items() if letter not in group)
        if self.kind == "elementwise":
            return self.flops_per_element * self.output.elements
        if self.kind == "fused":
            return _sum(part.flops for part in self.parts)
        return 0 * self.output.elements  # no FLOPs (a copy): a zero of the shapes' kind (sympy or plain)

    @property
    def memory_elements(self) -> object:
        return _sum(t.elements for t in self.inputs) + self.output.elements


def is_weight(tensor: Tensor) -> bool:
    """Parameters are named ``P_*`` (attention projections) or ``W_*`` (everything else)."""
    return tensor.name.startswith(("P_", "W_"))


def bias_elements(op: Op) -> object:
    """Elements of the bias a projection would add: the weight's axes that survive into the output
    (``h k`` of ``bd,hdk->bhk``; ``d`` of ``bhv,hdv->bd``); 0 for ops without a weight."""
    return _sum(
        [0 * op.output.elements]
        + [
            _prod(size for letter, size in zip(t.indices, t.shape) if letter in op.output.indices)
            for t in op.inputs
            if op.kind == "einsum" and is_weight(t)
        ]
    )


def gemm_dims(op: Op) -> tuple[object, object, object, object]:
    """An einsum as a batched matrix product: (batch, M, K, N) sizes from its shapes. Batch indices are
    in both operands and the output, K is contracted, M belongs to the first operand, N to the second."""
    if op.kind != "einsum":
        raise ValueError(f"{op.name} is not an einsum")
    sizes = op.index_sizes()
    a, b, out = (set(t.indices) for t in (*op.inputs, op.output))
    prod = lambda idx: _prod(sizes[i] for i in sorted(idx))  # noqa: E731
    return prod(a & b & out), prod((a - b) & out), prod((a & b) - out), prod((b - a) & out)


def grouped_dims(op: Op) -> tuple[object, object, object, object]:
    """A grouped product as (groups, rows, K, N): the group axis of the second operand (the touched experts),
    the first operand's rows, the contracted axis and the output's columns."""
    if op.kind != "grouped":
        raise ValueError(f"{op.name} is not a grouped product")
    sizes = op.index_sizes()
    a, b, out = (set(t.indices) for t in (*op.inputs, op.output))
    prod = lambda idx: _prod(sizes[i] for i in sorted(idx))  # noqa: E731
    return prod(b - a - out), prod((a - b) & out), prod((a & b) - out), prod((b - a) & out)


def norm_name(norm: str) -> str:
    """The name of a model's norm ops, which picks their kernel's class: an engine runs its own RMSNorm
    kernel (``norm``) and torch's LayerNorm (``layernorm``)."""
    return "layernorm" if norm == "layernorm" else "norm"
