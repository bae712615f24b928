"""The hardware's bound on every price: no op runs its FLOPs faster than the device's peak for its precision, and
no op streams more bytes than any on-chip cache holds faster than the memory's bandwidth. :func:`check` is called
by the one :func:`costmodel.price.op.price` on every time it computes; a time under the bound is a bug in a fit or
a mechanism, raised as :class:`PriceBoundError` (exit 3 on the command line), never printed as a prediction.

The work compared is the kernel's, not the program's where the two differ: a causal prefill kernel computes the
query-key pairs at or before each query (:func:`costmodel.hardware.tiles.causal_pairs`; within its window,
:func:`~costmodel.hardware.tiles.windowed_pairs`), not every pair the paper's program counts, and an unfused mask is read as one broadcast ``[n, m]`` mask, not the program's
``[b, h, n, m]`` one (:class:`costmodel.hardware.shapes.MaskShape`).
"""

from __future__ import annotations

import numpy as np

from costmodel.hardware.mechanisms import PROGRAM_CLASS
from costmodel.hardware.shapes import MaskShape, PrefillShape
from costmodel.hardware.tiles import causal_pairs, windowed_pairs

#: Bytes beyond every on-chip cache of a shipped device (the largest: MI300X's and MI325X's 256 MB Infinity Cache):
#: an op that moves more streams them from memory, at most at its bandwidth. Smaller ones may run from a cache.
CACHE_BYTES = 256 * 2**20
#: Rounding allowed below the bound (the times are sums of floats).
SLACK = 1e-6


class PriceBoundError(RuntimeError):
    """A price under the hardware's bound: a bug in a fit or a mechanism."""


def kernel_work(op, shape) -> tuple[object, object]:
    """(FLOPs, bytes) the kernel does for ``op`` of ``shape``: the program's, less a causal prefill kernel's skipped
    pairs and the mask a real kernel broadcasts."""
    flops, nbytes = op.flops, op.bytes
    if isinstance(shape, PrefillShape):
        n, m = np.asarray(shape.n, float), np.asarray(shape.m, float)
        pairs = causal_pairs(n, m) if shape.window is None else windowed_pairs(n, m, shape.window, False)
        flops = np.asarray(flops, float) * pairs / np.maximum(n * m, 1)
    if isinstance(shape, MaskShape):
        nbytes = np.asarray(nbytes, float) - np.asarray(shape.mask_bytes, float) + np.asarray(shape.broadcast_bytes)
    return flops, nbytes


def check(op, shape, hw, time) -> None:
    """Raise :class:`PriceBoundError` where ``time`` (seconds, or an array) is under the bound of ``op`` on ``hw``."""
    if op.kind not in PROGRAM_CLASS:
        return  # a program's ops only: a published table's rows (kinds named by their class) are what fits compare
    peak = op.peak or (hw.peak_flops_per_s[op.dtype].value if op.dtype in hw.peak_flops_per_s else None)
    flops, nbytes = kernel_work(op, shape)
    time = np.asarray(time, float)
    floors = []
    if peak:
        floors.append(("FLOP rate", np.asarray(flops, float) / peak, f"the {op.dtype} peak"))
    big = np.asarray(nbytes, float) > CACHE_BYTES
    if np.any(big):
        floors.append(
            ("byte rate", np.where(big, np.asarray(nbytes, float) / hw.bandwidth, 0.0), "the memory bandwidth")
        )
    for what, floor, of in floors:
        under = time < floor * (1 - SLACK)
        if np.any(under):
            ratio = float(np.max(np.where(under, floor / np.maximum(time, 1e-30), 0.0)))
            raise PriceBoundError(
                f"{op.name} ({op.kind}) on {hw.id}: priced at {ratio:.3g}x {of} ({what}); a fit or a mechanism "
                "prices it faster than the hardware runs"
            )
