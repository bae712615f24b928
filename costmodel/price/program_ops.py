"""A compiled attention program's ops as a device prices them (:func:`program_ops`)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from costmodel.hardware.mechanisms import (
    W4A16_MOE,
    efficiency_class,
    w4a16_small_call,
)
from costmodel.price.op import KernelOp, Precision


class ProgramOp(NamedTuple):
    """One op of a compiled program as a device prices it: the op, its typed shape, its einsum, and whether
    it is a GEMM over stored projection weights."""

    op: KernelOp
    shape: object
    einsum: str | None
    weighted: bool


def program_ops(
    compiled, dims: dict, mode: str, precision: Precision, launches=1, *, kernel_dims=None, window=None
) -> list[ProgramOp]:
    """Every op of a compiled program (attention, or a block of a model step) at ``dims`` (numbers, or arrays
    for a sweep): what a prediction, a sweep and a model step price, by the same loop. ``kernel_dims`` are
    the dimensions of the attention kernel where they differ from the program's (multi-head latent
    attention), ``window`` a local layer's sliding window."""
    from costmodel.hardware.op_shapes import op_shape

    flops, elements, _, _ = compiled.at(dims)
    weights, cache = compiled.storage(dims)
    out = []
    outside = precision.outside_experts()
    for name, kind, einsum, f, e, w, c, gemm, grouped in zip(
        compiled.names,
        compiled.kinds,
        compiled.einsums,
        flops,
        elements,
        weights,
        cache,
        compiled.gemm_shapes(dims),
        compiled.grouped,
    ):
        # the routed experts' grouped products in the checkpoint's format; every other op as the rest of it is stored
        p = precision if grouped else outside
        # a product with weight operands, however many of them an entry of an array reads (a step that routes no
        # rows to a device's experts reads none: its other entries are priced as the weights' format still)
        weighted = gemm is not None and bool(np.any(np.asarray(w) > 0))
        math = None if not weighted else (p.expert_dtype if grouped else None) or p.gemm_dtype
        fast = math is not None
        kernel = p.gemm_kernel if fast else None
        small = False
        if grouped:  # a mixture of experts' expert GEMMs: the engine's MoE kernel of that weight format
            kernel = p.experts_class(weighted) or kernel
            if kernel == W4A16_MOE and {"called", "top", "e"} <= dims.keys():
                small = w4a16_small_call(dims["called"], dims["top"], dims["e"])
        op = KernelOp(kind, name, math or p.dtype, f, p.bytes(e, w, c), launches, kernel=kernel, small_call=small)
        if gemm is not None:
            gemm = {key: x if np.ndim(x) else int(x) for key, x in gemm.items()}
            if grouped and "blocks" in dims:  # skewed routing: each expert's rows in whole blocks of its own
                gemm["m_blocks"] = dims["blocks"]
            if grouped and "called" in dims:  # the tokens the layer's kernel is given
                gemm["tokens"] = dims["called"]
        cls = efficiency_class(kind, name)
        shape = op_shape(cls, dims if kernel_dims is None or gemm is not None else kernel_dims, mode, gemm, name, p.act)
        if window is not None and cls == "prefill_attention":
            shape = dataclasses.replace(shape, window=window)
        out.append(ProgramOp(op, shape, einsum, weighted))
    return out
