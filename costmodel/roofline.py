"""Roofline latency of attention programs on a hardware profile.

Per op: ``time = max(FLOPs / peak, bytes / bandwidth) + launch`` (``overlap="max"``, compute and memory
traffic overlap perfectly) or ``FLOPs / peak + bytes / bandwidth + launch`` (``overlap="sum"``, no overlap).
Einsums and fused attention run at the dtype's dense peak; elementwise ops at the vector (fp32,
non-tensor) peak where the profile has one. Every op is one kernel launch per layer and per step.

The exact symbolic counts of :mod:`costmodel.counts` are compiled once per (variant, mode, execution,
cache append) into numpy functions, so :func:`predict` and :func:`sweep` evaluate the same expressions,
on scalars or on arrays of any size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import sympy
from pydantic import BaseModel, ConfigDict, Field, model_validator

from costmodel import symbols as S
from costmodel.counts import derive
from costmodel.errors import CostModelError
from costmodel.hardware import HardwareProfile
from costmodel.program import build_program, check_divisible, op_class

ARGS = (S.b, S.n, S.m, S.d, S.h, S.g, S.k, S.v)
Overlap = Literal["max", "sum"]
#: The dimension that grows the KV cache in each mode (the one "largest context" solves for).
CONTEXT_DIM = {"batched": "m", "incremental": "m", "generate": "n"}


class Workload(BaseModel):
    """One attention workload: a variant and mode with every dimension a number."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    variant: Literal["mha", "mqa", "gqa"]
    mode: Literal["batched", "incremental", "generate"]
    b: int = Field(ge=1)
    n: int = Field(ge=1)
    m: int = Field(ge=0)
    d: int = Field(ge=1)
    h: int = Field(ge=1)
    g: int = Field(ge=1)
    k: int = Field(ge=1)
    v: int = Field(ge=1)
    dtype: Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"] = "bf16"
    layers: int = Field(default=1, ge=1)
    execution: Literal["unfused", "fused"] = "unfused"
    cache_append: Literal["inplace", "concat"] = "inplace"

    @model_validator(mode="after")
    def _heads(self) -> Workload:
        expected = {"mha": self.h, "mqa": 1}.get(self.variant, self.g)
        if self.g != expected:
            raise ValueError(f"{self.variant} has g = {expected} key/value heads, got g = {self.g}")
        check_divisible(self.h, self.g)
        return self

    @classmethod
    def create(
        cls,
        variant: str = "mha",
        mode: str = "incremental",
        *,
        batch: int = 16,
        seq: int | None = None,
        context: int | None = None,
        d_model: int = 4096,
        heads: int = 32,
        groups: int | None = None,
        head_dim: int | None = None,
        value_dim: int | None = None,
        dtype: str = "bf16",
        layers: int = 1,
        execution: str = "unfused",
        cache_append: str = "inplace",
    ) -> Workload:
        """A workload with the documented defaults filled in, and clear errors for bad combinations.

        Defaults: k = v = d/h; n = 4096 in batched and generate mode (1 in incremental); m = 4096 in
        incremental mode and m = n in batched mode; GQA's g = gcd(h, 8).
        """
        from costmodel.program import kv_heads

        if variant not in ("mha", "mqa", "gqa"):
            kv_heads(variant)  # raises with the valid choices
        g = int(kv_heads(variant, groups).subs(S.h, heads)) if variant != "gqa" or groups else math.gcd(heads, 8)
        check_divisible(heads, g)
        if mode == "generate" and context is not None:
            raise CostModelError("--context does not apply in generate mode (it starts from an empty cache); use --seq")
        if head_dim is None or value_dim is None:
            if d_model % heads:
                raise CostModelError(
                    f"d-model {d_model} is not divisible by heads {heads}; give --head-dim and --value-dim"
                )
        n = seq if seq is not None else (1 if mode == "incremental" else 4096)
        m = context if context is not None else (n if mode == "batched" else 4096 if mode == "incremental" else 0)
        try:
            return cls(
                variant=variant, mode=mode, b=batch, n=n, m=m, d=d_model, h=heads, g=g,
                k=head_dim or d_model // heads, v=value_dim or head_dim or d_model // heads,
                dtype=dtype, layers=layers, execution=execution, cache_append=cache_append,
            )
        except ValueError as err:  # pydantic's ValidationError is a ValueError
            raise CostModelError(_pydantic_message(err)) from None

    def dims(self) -> dict[str, int]:
        return {s.name: getattr(self, s.name) for s in ARGS}


def _pydantic_message(err: ValueError) -> str:
    errors = getattr(err, "errors", None)
    if errors is None:
        return str(err)
    first = errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where + ': ' if where else ''}{first['msg'].removeprefix('Value error, ')} (got {first.get('input')!r})"


@dataclass(frozen=True)
class Compiled:
    """A program's ops and one numpy function of (b, n, m, d, h, g, k, v) that returns, in order, every
    op's FLOPs, every op's memory elements, the weight elements and the KV-cache elements."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]  # the op class of each op (costmodel.program.op_class)
    einsums: tuple[str | None, ...]
    counts: object

    def evaluate(self, args) -> tuple[list, list, object, object]:
        """(flops per op, elements per op, weight elements, cache elements) at ``args``."""
        values = self.counts(*args)
        n = len(self.names)
        return values[:n], values[n:2 * n], values[2 * n], values[2 * n + 1]


@lru_cache(maxsize=64)
def compile_program(variant: str, mode: str, execution: str = "unfused", cache_append: str = "inplace") -> Compiled:
    """The program's exact counts, compiled once into a single numpy function."""
    report = derive(variant, mode, execution=execution, cache_append=cache_append, simplify=False)
    program = build_program(variant, mode, cache_append=cache_append, execution=execution)
    weights, cache = program.resident_elements()
    exprs = [o.flops for o in report.ops] + [o.memory_elements for o in report.ops] + [weights, cache]
    return Compiled(
        names=tuple(o.name for o in report.ops), kinds=tuple(op_class(o, mode) for o in program.ops),
        einsums=tuple(o.einsum for o in report.ops), counts=_numeric_function(exprs),
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


class OpPrediction(BaseModel):
    name: str
    einsum: str | None
    flops: float
    bytes: float
    intensity: float
    compute_s: float
    memory_s: float
    launch_s: float
    time_s: float
    bound: Literal["compute", "memory"]


class Totals(BaseModel):
    flops: float
    bytes: float
    time_s: float
    compute_s: float
    memory_s: float
    launch_s: float
    bound: Literal["compute", "memory"]
    per_token_s: float | None
    tokens_per_s: float


class MemoryFit(BaseModel):
    kv_cache_bytes: float
    weight_bytes: float
    capacity_bytes: float
    fits: bool
    max_batch: int
    max_context: int
    context_dim: str


class Prediction(BaseModel):
    """A frozen report: per-op rows (per layer) and totals (all layers); ``model_dump()`` is the JSON."""

    model_config = ConfigDict(frozen=True)

    hardware: dict
    workload: Workload
    overlap: Overlap
    ops: list[OpPrediction]
    total: Totals
    memory: MemoryFit
    assumptions: list[str]

    def __str__(self) -> str:
        from costmodel.format import prediction_table

        return prediction_table([self])


def op_time(hw: HardwareProfile, op_class: str, dtype: str, flops, nbytes, overlap: str = "max",
            launches=1, maximum=max, peak: float | None = None):
    """The roofline of one op: (compute_s, memory_s, launch_s, time_s), from its class's rates.

    Works on Python numbers, or on numpy arrays with ``maximum=np.maximum``. ``peak`` overrides the
    class's FLOP rate (a mechanism such as multi-pass f32 matmuls).
    """
    compute = flops / (peak or hw.peak_for(op_class, dtype))
    memory = nbytes / hw.bandwidth_for(op_class, dtype)
    launch = hw.overhead_for(op_class) * launches
    body = maximum(compute, memory) if overlap == "max" else compute + memory
    return compute, memory, launch, body + launch


def predict(workload: Workload, hw: HardwareProfile, overlap: str = "max") -> Prediction:
    """Roofline prediction of one workload on one device."""
    if overlap not in ("max", "sum"):
        raise CostModelError(f"unknown overlap {overlap!r}; valid values are max, sum")
    w = workload
    width = S.dtype_bytes(w.dtype)
    hw.peak(w.dtype)  # a dtype the device lacks is an error before any arithmetic
    compiled = compile_program(w.variant, w.mode, w.execution, w.cache_append)
    flops_per_op, elements_per_op, _, _ = compiled.evaluate([getattr(w, s.name) for s in ARGS])
    rows = []
    for name, kind, einsum, f, e in zip(compiled.names, compiled.kinds, compiled.einsums, flops_per_op, elements_per_op):
        flops, nbytes = float(f), float(e) * width
        compute, memory, launch, time = op_time(hw, kind, w.dtype, flops, nbytes, overlap,
                                                launches=w.n if w.mode == "generate" else 1)
        rows.append(OpPrediction(
            name=name, einsum=einsum, flops=flops, bytes=nbytes,
            intensity=flops / nbytes if nbytes else 0.0, compute_s=compute, memory_s=memory,
            launch_s=launch, time_s=float(time), bound="compute" if compute > memory else "memory",
        ))
    L = w.layers
    compute = L * sum(r.compute_s for r in rows)
    memory = L * sum(r.memory_s for r in rows)
    time = L * sum(r.time_s for r in rows)
    tokens = w.b * (w.n if w.mode in ("batched", "generate") else 1)
    per_token = {"incremental": time, "generate": time / w.n}.get(w.mode)
    total = Totals(
        flops=L * sum(r.flops for r in rows), bytes=L * sum(r.bytes for r in rows), time_s=time,
        compute_s=compute, memory_s=memory, launch_s=L * sum(r.launch_s for r in rows),
        bound="compute" if compute > memory else "memory", per_token_s=per_token, tokens_per_s=tokens / time,
    )
    return Prediction(
        hardware=hardware_summary(hw, w.dtype), workload=w, overlap=overlap, ops=rows, total=total,
        memory=memory_fit(compiled, w, hw), assumptions=assumptions(w, hw, overlap),
    )


def hardware_summary(hw: HardwareProfile, dtype: str) -> dict:
    return {
        "id": hw.id, "name": hw.name, "kind": hw.kind, "dtype": dtype,
        "peak_flops_per_s": hw.peak(dtype), "vector_peak_flops_per_s": hw.vector_peak(dtype),
        "memory_bandwidth_bytes_per_s": hw.bandwidth, "memory_capacity_bytes": hw.capacity,
        "launch_overhead_s": hw.launch_overhead, "ridge_point_flops_per_byte": hw.ridge_point(dtype),
        "measured": hw.measured is not None,
    }


def memory_fit(compiled: Compiled, w: Workload, hw: HardwareProfile) -> MemoryFit:
    """KV cache and weights against capacity; the largest batch and context that fit (others fixed)."""
    width = S.dtype_bytes(w.dtype) * w.layers
    dims = w.dims()
    cache = lambda **kw: float(compiled.evaluate([{**dims, **kw}[s.name] for s in ARGS])[3]) * width  # noqa: E731
    weights = float(compiled.evaluate([dims[s.name] for s in ARGS])[2]) * width
    kv, free = cache(), hw.capacity - weights
    per_sequence = cache(b=1)
    ctx = CONTEXT_DIM[w.mode]
    # the cache is linear in the context dimension: intercept + slope * x
    at0, at1 = cache(**{ctx: 0}), cache(**{ctx: 1})
    max_batch = max(int(free // per_sequence), 0) if free > 0 else 0
    max_context = max(int((free - at0) // (at1 - at0)), 0) if free > at0 else 0
    return MemoryFit(
        kv_cache_bytes=kv, weight_bytes=weights, capacity_bytes=hw.capacity, fits=kv + weights <= hw.capacity,
        max_batch=max_batch, max_context=max_context, context_dim=ctx,
    )


def assumptions(w: Workload, hw: HardwareProfile, overlap: str) -> list[str]:
    how = "max(compute, memory)" if overlap == "max" else "compute + memory"
    peaks = "measured" if hw.measured else "datasheet dense"
    launch = ("measured overhead per op class" if hw.op_classes else f"{hw.launch_overhead * 1e6:g} us launch")
    out = [
        f"roofline per op: time = {how} + {launch} per kernel; {peaks} peaks "
        f"({w.dtype} for einsums, vector peak for elementwise ops)"
        + ("; measured FLOP rate and bandwidth per op class where calibrated" if hw.op_classes else ""),
        "every op is its own kernel; intermediates go through memory" if w.execution == "unfused" else
        "fused attention: logits and weights stay on chip; K and V are read once with their g heads",
        f"op rows are per layer; totals are x {w.layers} layer(s); weights are the attention projections only",
        "memory fit: weights + KV cache against capacity, no activations or framework overhead",
    ]
    if w.mode == "generate":
        out.append("generate: the roofline is applied to each op's n-step totals (exact when every step has the same bound)")
    return out


def sweep(
    workload: Workload, hw: HardwareProfile, dim: str, values, overlap: str = "max", linked: tuple[str, ...] = ()
) -> dict:
    """Evaluate the prediction over an array of values of one dimension, vectorised with numpy.

    ``linked`` dimensions take the same values (``m`` with ``n`` for batched self-attention). Returns
    arrays ``time_s``, ``flops``, ``bytes``, ``kv_cache_bytes`` and the boolean ``fits``, and the
    dimensions swept.
    """
    import numpy as np  # only sweeps need arrays; a single prediction runs on Python numbers

    if dim not in {s.name for s in ARGS}:
        raise CostModelError(f"cannot sweep {dim!r}; valid dimensions are {', '.join(s.name for s in ARGS)}")
    w = workload
    hw.peak(w.dtype)
    x = np.asarray(values, dtype=np.float64)
    dims = {s.name: np.float64(getattr(w, s.name)) for s in ARGS}
    for name in (dim, *linked):
        dims[name] = x
    if dim == "h" and w.variant == "mha":
        dims["g"] = x  # MHA keeps g = h; other dimensions, k and v included, stay as given
    compiled = compile_program(w.variant, w.mode, w.execution, w.cache_append)
    args = [dims[s.name] for s in ARGS]
    width = S.dtype_bytes(w.dtype)
    time = np.zeros_like(x)
    flops = np.zeros_like(x)
    nbytes = np.zeros_like(x)
    launches = dims["n"] if w.mode == "generate" else 1.0
    flops_per_op, elements_per_op, weight_elements, cache_elements = compiled.evaluate(args)
    for kind, f, e in zip(compiled.kinds, flops_per_op, elements_per_op):
        f = np.broadcast_to(f, x.shape).astype(np.float64)
        by = np.broadcast_to(e, x.shape) * float(width)
        time += op_time(hw, kind, w.dtype, f, by, overlap, launches=launches, maximum=np.maximum)[3]
        flops += f
        nbytes += by
    lw = width * w.layers
    kv = np.broadcast_to(cache_elements, x.shape) * float(lw)
    weights = np.broadcast_to(weight_elements, x.shape) * float(lw)
    return {
        **{name: x for name in (dim, *linked)}, "time_s": time * w.layers, "flops": flops * w.layers,
        "bytes": nbytes * w.layers, "kv_cache_bytes": kv, "fits": kv + weights <= hw.capacity,
    }


#: Sweepable dimensions by their CLI names.
SWEEP_DIMS = {"batch": "b", "seq": "n", "context": "m", "d-model": "d", "heads": "h", "groups": "g",
              "head-dim": "k", "value-dim": "v"}


def check_sweep(workloads: list[Workload], name: str, values: list[int]) -> tuple[str, tuple[str, ...]]:
    """The dimension behind a CLI sweep name, and the ones linked to it; errors for sweeps that make no sense."""
    if name not in SWEEP_DIMS:
        raise CostModelError(f"cannot sweep {name!r}; valid dimensions are {', '.join(SWEEP_DIMS)}")
    dim, mode = SWEEP_DIMS[name], workloads[0].mode
    if dim == "m" and mode == "generate":
        raise CostModelError("generate mode has no context to sweep (it starts from an empty cache); sweep seq")
    if dim == "g":
        if any(w.variant != "gqa" for w in workloads):
            raise CostModelError("sweeping groups needs --variant gqa")
        bad = [x for x in values if x < 1 or workloads[0].h % x]
        if bad:
            raise CostModelError(f"groups {bad} do not divide heads {workloads[0].h}")
    if dim != "m" and min(values) < 1:
        raise CostModelError(f"{name} values must be >= 1, got {min(values)}")
    linked = ("m",) if dim == "n" and mode == "batched" and all(w.m == w.n for w in workloads) else ()
    return dim, linked


def sweep_records(hw: HardwareProfile, workloads: list[Workload], name: str, values: list[int],
                  overlap: str = "max") -> list[dict]:
    """One record per (variant, value): time, per-token time, tokens/s, FLOPs, bytes, KV cache, fit."""
    dim, linked = check_sweep(workloads, name, values)
    records = []
    for w in workloads:
        r = sweep(w, hw, dim, values, overlap, linked)
        for i, x in enumerate(values):
            b = float(r["b"][i]) if dim == "b" else w.b
            n = float(r["n"][i]) if dim == "n" else w.n
            time = float(r["time_s"][i])
            per_token = {"incremental": time, "generate": time / n}.get(w.mode)
            tokens = b if w.mode == "incremental" else b * n
            records.append({
                name: x, "variant": w.variant, "g": int(r["g"][i]) if dim == "g" else w.g, "time_s": time,
                "per_token_s": per_token, "tokens_per_s": tokens / time, "flops": float(r["flops"][i]),
                "bytes": float(r["bytes"][i]), "kv_cache_bytes": float(r["kv_cache_bytes"][i]),
                "fits": bool(r["fits"][i]),
            })
    return records
