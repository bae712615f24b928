"""One attention workload on a device: :func:`predict` (and :func:`compare` for several variants) prices every
op of the compiled program with :func:`costmodel.price.op.price` (the fitted mechanisms, or the datasheet roofline
``max(FLOPs / peak, bytes / bandwidth) + launch`` where a device has none) and reports each op, the totals, what
fits in memory and the assumptions, as a frozen :class:`Prediction`.

The exact symbolic counts of :mod:`costmodel.counts.exact` are compiled once per (variant, mode, execution,
cache append) into numpy functions, so :func:`predict` and :func:`costmodel.attention.sweeps.sweep` evaluate the same
expressions, on scalars or on arrays of any size.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from pydantic import ConfigDict, RootModel

from costmodel.attention.workload import Workload
from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.core.fits import largest_count, largest_fitting
from costmodel.core.reports import DeviceSummary, Report
from costmodel.core.vocab import DEFAULTS, OVERLAPS, choice, dtype_bytes
from costmodel.counts.compiled import Compiled, compile_program
from costmodel.hardware.mechanisms import MECHANISMS
from costmodel.hardware.power import PowerModel
from costmodel.hardware.profile import HardwareProfile
from costmodel.price.bands import Band, band
from costmodel.price.bands import assumption as band_assumption
from costmodel.price.bands import total as band_total
from costmodel.price.op import Conventions, Precision, price
from costmodel.price.origin import time_model
from costmodel.price.program_ops import program_ops

Overlap = Literal["max", "sum"]
#: The dimension that grows the KV cache in each mode (the one "largest context" solves for).
CONTEXT_DIM = {"batched": "m", "incremental": "m", "generate": "n"}


class OpPrediction(Report):
    name: str
    einsum: str | None
    flops: float
    bytes: float
    intensity: float
    compute_s: float
    memory_s: float
    launch_s: float  # the per-call overhead: the fitted fixed cost (and decode work units), or the launch
    time_s: float
    bound: Literal["compute", "memory"]
    efficiency_class: str | None = None  # the fitted class that priced it (None: datasheet roofline)
    band: Band | None = None  # where the measured time is expected to fall (costmodel.price.bands)
    energy_j: float | None = None  # the device's energy over the op (costmodel.hardware.power); None: no board power


class Totals(Report):
    flops: float
    bytes: float
    time_s: float
    compute_s: float
    memory_s: float
    launch_s: float
    bound: Literal["compute", "memory"]
    per_token_s: float | None
    tokens_per_s: float
    band: Band | None = None  # the ops' ranges added (costmodel.price.bands.total)
    energy_j: float | None = None  # every op's energy over the layers (None: the device states no board power)
    power_w: float | None = None  # that energy over the time


class MemoryFit(Report):
    kv_cache_bytes: float
    weight_bytes: float
    capacity_bytes: float
    fits: bool
    max_batch: int
    max_context: int
    context_dim: str


class Prediction(Report):
    """A frozen report: per-op rows (per layer) and totals (all layers); ``model_dump()`` is the JSON."""

    hardware: DeviceSummary
    workload: Workload
    overlap: Overlap
    timing: str = "graph"
    mechanisms: list[str] = []  # the fitted mechanisms in use (empty: the datasheet roofline)
    ops: list[OpPrediction]
    total: Totals
    memory: MemoryFit
    assumptions: list[str]

    def __str__(self) -> str:
        from costmodel.render.text import prediction_table

        return prediction_table([self])


class Comparison(RootModel[list[Prediction]]):
    """Predictions of several variants of one workload on one device; ``str()`` is the side-by-side
    table with speed-ups over the first, ``model_dump()`` the JSON array."""

    model_config = ConfigDict(frozen=True)

    def __str__(self) -> str:
        from costmodel.render.text import prediction_table

        return prediction_table(self.root)

    def __iter__(self):
        return iter(self.root)

    def __getitem__(self, i: int) -> Prediction:
        return self.root[i]

    def __len__(self) -> int:
        return len(self.root)


def predict(
    workload: Workload,
    hw: HardwareProfile,
    overlap: str = DEFAULTS["overlap"],
    timing: str = "graph",
    without=(),
    prompt_write: str | None = None,
    kernels: str | None = None,
) -> Prediction:
    """Prediction of one workload on one device: the fitted mechanisms of :mod:`costmodel.hardware.mechanisms`
    for the ``timing`` convention (``without`` switches mechanisms off; ``("all",)`` is the bare
    datasheet roofline), or the datasheet roofline where the device has no fitted parameters. ``prompt_write``:
    whether the prompt call holds its cache write (:data:`costmodel.core.vocab.PROMPT_WRITES`; None: as the
    device's fit says). ``kernels``: the serving engine whose own kernel classes price the ops where fitted (None:
    the device's, vLLM's)."""
    checks.instance("workload", workload, Workload, "a Workload (Workload.create(...))")
    checks.instance("hw", hw, HardwareProfile, "a HardwareProfile (load_profile(...))")
    overlap = choice("overlap", overlap, OVERLAPS)
    model = time_model(hw, timing, without, prompt_write, kernels)
    w = workload
    width = dtype_bytes(w.dtype)
    hw.peak(w.dtype)  # a dtype the device lacks is an error before any arithmetic
    compiled = compile_program(w.variant, w.mode, w.execution, w.cache_append)
    rows, pm = [], PowerModel.of(hw)
    for op, shape, einsum, _ in program_ops(
        compiled, w.dims(), w.mode, Precision.of(width, w.dtype), launches=w.n if w.mode == "generate" else 1
    ):
        op = dataclasses.replace(op, flops=float(op.flops), bytes=float(op.bytes))
        t = price(op, shape, hw, Conventions(model, overlap))
        rows.append(
            OpPrediction(
                name=op.name,
                einsum=einsum,
                flops=op.flops,
                bytes=op.bytes,
                intensity=op.flops / op.bytes if op.bytes else 0.0,
                compute_s=t.compute,
                memory_s=t.memory,
                launch_s=t.overhead,
                time_s=t.time,
                bound=t.bound,
                efficiency_class=t.cls,
                band=band(t.time, hw, model, op.cls),
                energy_j=float(pm.kernel(op, t.time).energy_j) if pm is not None else None,
            )
        )
    L = w.layers
    energy = L * sum(r.energy_j for r in rows) if pm is not None else None
    compute = L * sum(r.compute_s for r in rows)
    memory = L * sum(r.memory_s for r in rows)
    time = L * sum(r.time_s for r in rows)
    tokens = w.b * (w.n if w.mode in ("batched", "generate") else 1)
    per_token = {"incremental": time, "generate": time / w.n}.get(w.mode)
    total = Totals(
        flops=L * sum(r.flops for r in rows),
        bytes=L * sum(r.bytes for r in rows),
        time_s=time,
        compute_s=compute,
        memory_s=memory,
        launch_s=L * sum(r.launch_s for r in rows),
        bound="compute" if compute > memory else "memory",
        per_token_s=per_token,
        tokens_per_s=tokens / time,
        band=band_total((L * r.time_s, r.band and r.band.scaled(L)) for r in rows),
        energy_j=energy,
        power_w=energy / time if energy is not None and time > 0 else None,
    )
    return Prediction(
        hardware=hardware_summary(hw, w.dtype, model),
        workload=w,
        overlap=overlap,
        timing=model.timing,
        mechanisms=sorted(model.on) if model.active else [],
        ops=rows,
        total=total,
        memory=memory_fit(compiled, w, hw),
        assumptions=assumptions(w, hw, overlap, model) + band_assumption((r.band for r in rows), hw),
    )


def compare(
    workloads: list[Workload],
    hw: HardwareProfile,
    overlap: str = DEFAULTS["overlap"],
    timing: str = "graph",
    without=(),
    prompt_write: str | None = None,
    kernels: str | None = None,
) -> Comparison:
    """Predictions of several workloads (variants of one) on one device, speed-ups over the first."""
    if not isinstance(workloads, (list, tuple)) or not workloads:
        raise CostModelError(f"workloads must be a non-empty list of Workload, got {workloads!r}"[:200])
    return Comparison([predict(w, hw, overlap, timing, without, prompt_write, kernels) for w in workloads])


def hardware_summary(hw: HardwareProfile, dtype: str, model=None, devices: int = 1) -> DeviceSummary:
    """The device as a report states it; ``efficiency`` says what the time model is (None: the datasheet
    roofline with the profile's launch overhead)."""
    efficiency = None
    if model is not None and model.active:
        kinds = {o.kind for o in model.resolved.origin.values()}
        where = "fitted and transferred" if len(kinds) > 1 else kinds.pop()
        efficiency = f"{where} efficiency, {model.timing} timing"
    return DeviceSummary(
        efficiency=efficiency,
        id=hw.id,
        name=hw.name,
        kind=hw.kind,
        dtype=dtype,
        peak_flops_per_s=hw.peak(dtype),
        vector_peak_flops_per_s=hw.vector_peak(dtype),
        memory_bandwidth_bytes_per_s=hw.bandwidth,
        memory_capacity_bytes=hw.capacity,
        launch_overhead_s=hw.launch_overhead,
        ridge_point_flops_per_byte=hw.ridge_point(dtype),
        measured=hw.measured is not None,
        devices=devices,
    )


def memory_fit(compiled: Compiled, w: Workload, hw: HardwareProfile) -> MemoryFit:
    """KV cache and weights against capacity; the largest batch and context that fit (others fixed)."""
    width = dtype_bytes(w.dtype) * w.layers
    dims = w.dims()
    cache = lambda **kw: float(compiled.resident({**dims, **kw})[1]) * width  # noqa: E731
    weights = float(compiled.resident(dims)[0]) * width
    kv, free = cache(), hw.capacity - weights
    ctx = CONTEXT_DIM[w.mode]
    # no cache at all (a prefill over no memory positions): the batch and context are not limited by memory
    max_batch = largest_count(free, cache(b=1))
    max_context = largest_fitting(lambda c: weights + cache(**{ctx: c}) <= hw.capacity)
    return MemoryFit(
        kv_cache_bytes=kv,
        weight_bytes=weights,
        capacity_bytes=hw.capacity,
        fits=kv + weights <= hw.capacity,
        max_batch=max_batch,
        max_context=max_context,
        context_dim=ctx,
    )


def mechanism_lines(hw: HardwareProfile, model) -> list[str]:
    """What the time model of a prediction is, in words: which mechanisms, fitted on what."""
    if not model.active:
        if model.resolved is None:
            return [
                f"no fitted efficiency for {hw.id} (none fitted, none transferable): the datasheet roofline, "
                "a lower bound on time"
            ]
        return [
            "every mechanism switched off: the bare datasheet roofline, max(FLOPs / peak, bytes / bandwidth) "
            "with no launch cost, a lower bound on time"
        ]
    off = [m for m in MECHANISMS if m not in model.on]
    lines = [
        f"time per op: a fixed cost per call ({model.timing} timing) + the longer of compute and memory at the "
        "fitted rates + any second kernels (costmodel explain time-model); mechanisms on: "
        + ", ".join(sorted(model.on))
        + (f"; off: {', '.join(off)}" if off else "")
    ]
    serial = sorted(cls for cls, eff in model.resolved.classes.items() if eff.overlap == "sum")
    if serial:
        lines.append(
            "compute + memory instead of max for the classes whose kernel does one after the other: "
            + ", ".join(serial)
        )
    lines.append(efficiency_line(model.resolved.origin))
    if any(o.kind == "transferred" for o in model.resolved.origin.values()):
        lines.append(
            "transfer rule: a fitted device's fractions of peak carried to this one; fixed costs and SM times "
            "follow the clock, a vector kernel's bandwidth SMs x clock (costmodel explain transfer-rule)"
        )
    return lines


def efficiency_line(origins: dict) -> str:
    """Where the kernel classes' parameters come from, one clause per origin: ``fitted on h100_sxm: gemm, ...;
    transferred from a100_80gb_sxm: activation, ...`` (each class's own notes: costmodel explain efficiency)."""
    by: dict[str, list[str]] = {}
    for cls, origin in sorted(origins.items()):
        by.setdefault(f"{origin.kind} {'on' if origin.kind == 'fitted' else 'from'} {origin.device}", []).append(cls)
    return (
        "efficiency parameters: "
        + "; ".join(f"{where}: {', '.join(classes)}" for where, classes in by.items())
        + " (each class's origin: costmodel explain efficiency)"
    )


def time_model_text(timing: str = "graph") -> str:
    """The whole time model in words (costmodel explain time-model), under a ``timing`` convention."""
    return (
        f"time = fixed cost per call ({timing} timing) + max(compute at the fitted efficiency with "
        "tile and wave quantization, bytes at the fitted achieved-bandwidth curve) + second kernels (decode "
        "work units and split-KV combine, split-K reduction, a prefill's cache write, a low-precision layer's "
        "input quantize)"
    )


def assumptions(w: Workload, hw: HardwareProfile, overlap: str, model=None) -> list[str]:
    how = "max(compute, memory)" if overlap == "max" else "compute + memory"
    peaks = "measured" if hw.measured else "datasheet dense"
    launch = (
        f" + {hw.launch_overhead * 1e6:g} µs launch per kernel"
        if model is None or "fixed" in model.on
        else ", no launch cost"
    )
    if model is not None and model.active:
        out = mechanism_lines(hw, model)
    else:
        out = [
            f"roofline per op: time = {how}{launch}; {peaks} peaks "
            f"({w.dtype} for einsums, vector peak for elementwise ops)"
        ]
        tile = hw.systolic_tile
        if tile is not None and model is not None and "tiles" in model.on:
            out.append(
                f"matrix unit: a systolic array of {tile[0]} x {tile[1]}; every product in whole passes of it "
                f"(K and N in whole tiles, at least {tile[0]} rows of M a pass: a head's one query row in "
                f"decode costs {tile[0]}; --without tiles: none)"
            )
        out += mechanism_lines(hw, model) if model is not None else []
    out += [
        "every op is its own kernel; intermediates go through memory"
        if w.execution == "unfused"
        else "fused attention: logits and weights stay on chip; K and V are read once with their g heads",
        f"op rows are per layer; totals are x {w.layers} layer(s); weights are the attention projections only",
        "memory fit: weights + KV cache against capacity, no activations or framework overhead",
    ]
    if w.mode == "generate":
        out.append(
            "generate: the roofline is applied to each op's n-step totals (exact when every step has the same bound)"
        )
    return out
