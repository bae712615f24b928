"""The data the figures draw, computed from the model (:mod:`costmodel.render.plots` only draws it): every op's place
under a device's roofline, and where each variant of a sweep runs out of memory."""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.attention.roofline import memory_fit, predict
from costmodel.attention.sweeps import sweep_arrays
from costmodel.attention.workload import Workload
from costmodel.counts.compiled import compile_program
from costmodel.hardware.profile import HardwareProfile


@dataclass(frozen=True)
class RooflinePoint:
    """One op of one variant and mode: where it sits under the first device's roofline."""

    variant: str
    g: int
    mode: str
    op: str
    intensity: float  # FLOPs per byte
    attainable: float  # min(peak, intensity x bandwidth), FLOP/s
    bound: str


def roofline_points(hw: HardwareProfile, workloads: list[Workload]) -> list[RooflinePoint]:
    """Every op with FLOPs (the cache appends have none and no place on a log axis) of each workload."""
    points = []
    for w in workloads:
        for op in predict(w, hw).ops:
            if op.flops > 0:
                attainable = min(hw.peak(w.dtype), op.intensity * hw.bandwidth)
                points.append(RooflinePoint(w.variant, w.g, w.mode, op.name, op.intensity, attainable, op.bound))
    return points


@dataclass(frozen=True)
class MemoryLimit:
    """The largest swept value at which weights + KV cache still fit, and the time there."""

    variant: str
    x: float | None  # None: fits over the whole range (or nowhere)
    time_s: float | None
    fits_everywhere: bool


def memory_limits(
    hw: HardwareProfile, workloads: list[Workload], dim: str, values, linked=(), overlap: str = "max", model=None
) -> list[MemoryLimit]:
    """Where each variant runs out of memory along the sweep: exact for batch and context, from the
    swept points for other dimensions."""
    import numpy as np

    from costmodel.attention.sweeps import CHUNK

    out = []
    values = np.asarray(values)
    for w in workloads:
        # a chunk of the values at a time: a long sweep's memory does not grow with its points
        any_fit, all_fit, last = False, True, None
        for start in range(0, len(values), CHUNK):
            part = values[start : start + CHUNK]
            fits = np.asarray(sweep_arrays(w, hw, dim, part, overlap, linked, model)["fits"], bool)
            any_fit, all_fit = any_fit or bool(fits.any()), all_fit and bool(fits.all())
            if fits.any():
                top = part[fits].max()
                last = top if last is None else max(last, top)
        if all_fit or not any_fit:
            out.append(MemoryLimit(w.variant, None, None, all_fit))
            continue
        if dim in ("b", "m") or (dim == "n" and w.mode == "generate"):
            mem = memory_fit(compile_program(w.variant, w.mode, w.execution, w.cache_append), w, hw)
            x = mem.max_batch if dim == "b" else mem.max_context
        else:
            x = last.item()
        t = float(sweep_arrays(w, hw, dim, [x], overlap, linked, model)["time_s"][0])
        out.append(MemoryLimit(w.variant, float(x), t, False))
    return out
