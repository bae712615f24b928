"""One GEMM as a device prices it: an M x K input by K x N weights in a format (bf16, per-tensor fp8, block-scaled
fp8, NVFP4), with the bytes its kernel moves, as published GEMM tables time it and ``costmodel predict --gemm``
prices it (numbers, or numpy arrays of shapes)."""

from __future__ import annotations

import numpy as np

from costmodel.hardware.mechanisms import LOW_PRECISION_GEMM, QUANTIZED_WIDTH, WEIGHT_MATH
from costmodel.price.op import KernelOp

#: The formats of one GEMM: its kernel class.
GEMM_FORMATS = {"bf16": "gemm", **LOW_PRECISION_GEMM}


def gemm_op(M, N, K, fmt: str = "bf16") -> tuple[KernelOp, dict]:
    """(the op, its shape) of ``M x K`` by ``K x N`` in ``fmt`` (:data:`GEMM_FORMATS`). bf16: two bytes an element
    read and written. fp8 (per tensor or block-scaled): inputs and weights one byte, the output in bf16. NVFP4 (vLLM's
    W4A4 linear layer, timed whole: it quantizes its bf16 input itself): the input and output in bf16, the weights 4
    bits with an 8-bit scale per 16."""
    M, N, K = (np.asarray(x, float) if np.ndim(x) else float(x) for x in (M, N, K))
    if fmt == "bf16":
        nbytes = 2 * (M * K + K * N + M * N)
    elif fmt == "nvfp4":
        nbytes = 2 * M * K + QUANTIZED_WIDTH["gemm_nvfp4"] * K * N + 2 * M * N  # 4 bits and a byte per 16
    else:
        nbytes = M * K + K * N + 2 * M * N
    cls = GEMM_FORMATS[fmt]
    op = KernelOp(cls, cls, WEIGHT_MATH.get(fmt, "bf16"), 2 * M * N * K, nbytes, kernel=cls)
    return op, {"batch": np.ones_like(M) if np.ndim(M) else 1.0, "M": M, "K": K, "N": N}


def predict_gemm(
    hw, M: int, N: int, K: int, fmt: str = "bf16", timing: str = "graph", without=(), kernels=None
) -> dict:
    """One GEMM's time on ``hw`` under ``timing`` (mechanisms ``without``; ``kernels``: the serving engine whose own
    classes price it where fitted), as the JSON of ``costmodel predict --gemm`` states it."""
    from costmodel.core import checks
    from costmodel.core.errors import CostModelError
    from costmodel.price.op import Conventions, price
    from costmodel.price.origin import time_model

    for name, value in (("M", M), ("N", N), ("K", K)):
        checks.count(f"gemm {name}", value)
    if fmt not in GEMM_FORMATS:
        raise CostModelError(f"unknown GEMM format {fmt!r}; known: {', '.join(GEMM_FORMATS)}")
    hw.peak(WEIGHT_MATH.get(fmt, "bf16"))  # a format the device has no math for is an error first
    model = time_model(hw, timing, without, engine=kernels)
    op, shape = gemm_op(M, N, K, fmt)
    t = price(op, shape, hw, Conventions(model))
    origin = model.resolved.origin.get(op.kernel) if model.active else None
    return {
        "hardware": hw.id,
        "gemm": {"M": M, "N": N, "K": K, "format": fmt},
        "timing": model.timing,
        "kernels": kernels,
        "ops": [
            {
                "name": "gemm",
                "flops": float(op.flops),
                "bytes": float(op.bytes),
                "compute_s": float(t.compute),
                "memory_s": float(t.memory),
                "launch_s": float(t.overhead),
                "time_s": float(t.time),
                "bound": t.bound,
                "efficiency_class": t.cls,
                "parameters": str(origin) if origin is not None else "the datasheet roofline",
            }
        ],
    }
