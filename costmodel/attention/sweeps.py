"""Predictions over a range of one workload parameter, vectorised with numpy.

:func:`sweep` evaluates the same compiled expressions as :func:`costmodel.attention.roofline.predict` on an array
of values (a million points take about a tenth of a second) and returns a :class:`Sweep` report: one
record per (variant, value) with time, tokens/s, FLOPs, bytes, KV cache and whether it fits in memory.
"""

from __future__ import annotations

import dataclasses
import math

from pydantic import BaseModel, ConfigDict

from costmodel.attention.workload import Workload
from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.core.reports import DeviceSummary, Report
from costmodel.core.vocab import DECIMAL, DEFAULTS, MAX_DIM, OVERLAPS, SWEEP_DIMS, choice, dtype_bytes, whole
from costmodel.counts.compiled import ARG_NAMES, compile_program
from costmodel.hardware.profile import HardwareProfile
from costmodel.price.bands import band
from costmodel.price.op import Conventions, Precision, price
from costmodel.price.origin import time_model
from costmodel.price.program_ops import program_ops

#: The most points one range may hold unless told otherwise; more is refused before any work.
MAX_POINTS: int = DEFAULTS["max_points"]


def parse_range(text: str, limit: int = MAX_POINTS) -> list[int]:
    """``128:32768:x2`` (geometric), ``1:64:+8`` or ``1:64:8`` (linear), or ``1,2,4``: whole numbers in ASCII
    digits (with the size suffixes of :data:`costmodel.core.vocab.WHOLE`), a factor a decimal number."""
    return range_array(text, limit).tolist()


def range_array(text: str, limit: int = MAX_POINTS):
    """:func:`parse_range` as a numpy array of int64 (8 bytes a point), its length known before it is built."""
    import numpy as np

    bad = CostModelError(
        f"invalid range {text!r}; expected START:STOP:xFACTOR (e.g. 128:32768:x2), START:STOP:STEP or a comma list"
        " of whole numbers"
    )
    if not isinstance(text, str):
        raise bad
    if "," in text or ":" not in text:
        values = [whole(x) for x in text.split(",")]
        if None in values:
            raise bad
        if len(values) > limit:
            raise _too_many(text, len(values), limit)
        out = values
    else:
        parts = text.split(":")
        if len(parts) != 3:
            raise bad
        start, stop, step = whole(parts[0]), whole(parts[1]), parts[2]
        if start is None or stop is None:
            raise bad
        if step.startswith("x"):
            if not DECIMAL.fullmatch(step[1:]):
                raise bad
            factor = float(step[1:])
            if not factor > 1 or start < 1:
                raise CostModelError(f"invalid range {text!r}: a geometric range needs START >= 1 and FACTOR > 1")
            count = math.floor(math.log(stop / start, factor) + 1e-9) + 1 if stop >= start else 0
            if count > limit:
                raise _too_many(text, count, limit)
            if start * factor ** max(count - 1, 0) > MAX_DIM * 2:
                raise CostModelError(
                    f"range {text!r} goes up to {int(start * factor ** (count - 1))}; values must be at most {MAX_DIM}"
                )
            out = [int(round(start * factor**i)) for i in range(count)]
        else:
            stride = whole(step.removeprefix("+"))
            if stride is None:
                raise bad
            if stride < 1:
                raise CostModelError(f"invalid range {text!r}: the STEP must be >= 1")
            count = max(0, (stop - start) // stride + 1)
            if count > limit:
                raise _too_many(text, count, limit)
            if count and start + (count - 1) * stride > MAX_DIM:
                raise CostModelError(
                    f"range {text!r} goes up to {start + (count - 1) * stride}; values must be at most {MAX_DIM}"
                )
            return np.arange(start, stop + 1, stride, dtype=np.int64)
    if not out:
        raise bad
    if max(out) > MAX_DIM:
        raise CostModelError(f"range {text!r} goes up to {max(out)}; values must be at most {MAX_DIM}")
    return np.asarray(out, dtype=np.int64)


def _too_many(what: str, count: int, limit: int) -> CostModelError:
    return CostModelError(
        f"range {what!r} has {count} points, more than the limit of {limit}; use a coarser step, "
        "or raise the limit (max_points, --max-points)"
    )


def sweep_arrays(
    workload: Workload,
    hw: HardwareProfile,
    dim: str,
    values,
    overlap: str = DEFAULTS["overlap"],
    linked: tuple[str, ...] = (),
    model=None,
) -> dict:
    """Evaluate the prediction over an array of values of one dimension symbol (``b``, ``m``, ...).

    ``linked`` dimensions take the same values (``m`` with ``n`` for batched self-attention). Returns
    arrays ``time_s``, ``flops``, ``bytes``, ``kv_cache_bytes`` and the boolean ``fits``, and the
    dimensions swept.
    """
    import numpy as np  # only sweeps need arrays; a single prediction runs on Python numbers

    if dim not in ARG_NAMES:
        raise CostModelError(f"cannot sweep {dim!r}; valid dimensions are {', '.join(ARG_NAMES)}")
    w = workload
    hw.peak(w.dtype)
    x = np.asarray(values, dtype=np.float64)
    dims = {name: np.float64(getattr(w, name)) for name in ARG_NAMES}
    for name in (dim, *linked):
        dims[name] = x
    if dim == "h" and w.variant == "mha":
        dims["g"] = x  # MHA keeps g = h; other dimensions, k and v included, stay as given
    compiled = compile_program(w.variant, w.mode, w.execution, w.cache_append)
    model = time_model(hw) if model is None else model  # the default prediction: fitted, graph timing
    width = dtype_bytes(w.dtype)
    time = np.zeros_like(x)
    low, high = np.zeros_like(x), np.zeros_like(x)
    flops = np.zeros_like(x)
    nbytes = np.zeros_like(x)
    launches = dims["n"] if w.mode == "generate" else 1.0
    _, _, weight_elements, cache_elements = compiled.at(dims)
    for op, shape, _, _ in program_ops(compiled, dims, w.mode, Precision.of(width, w.dtype), launches):
        f = np.broadcast_to(op.flops, x.shape).astype(np.float64)
        by = np.broadcast_to(op.bytes, x.shape) * 1.0
        t = price(dataclasses.replace(op, flops=f, bytes=by), shape, hw, Conventions(model, overlap)).time
        time += t
        ratio = band(1.0, hw, model, op.cls)  # the ends of the op's measured range of measured / predicted
        low += t * (ratio.low_s if ratio is not None else np.nan)
        high += t * (ratio.high_s if ratio is not None else np.nan)
        flops += f
        nbytes += by
    lw = width * w.layers
    kv = np.broadcast_to(cache_elements, x.shape) * float(lw)
    weights = np.broadcast_to(weight_elements, x.shape) * float(lw)
    return {
        **{name: x for name in (dim, *linked)},
        "time_s": time * w.layers,
        "flops": flops * w.layers,
        "low_s": low * w.layers,
        "high_s": high * w.layers,
        "bytes": nbytes * w.layers,
        "kv_cache_bytes": kv,
        "fits": kv + weights <= hw.capacity,
    }


def check_sweep(workloads: list[Workload], name: str, values: list[int]) -> tuple[str, tuple[str, ...]]:
    """The dimension behind a sweep parameter, and the ones linked to it; errors for sweeps that make no sense."""
    name = choice("sweep parameter", name.replace("-", "_"), SWEEP_DIMS)
    dim, mode = SWEEP_DIMS[name], workloads[0].mode
    if dim == "m" and mode == "generate":
        raise CostModelError("generate mode has no context to sweep (it starts from an empty cache); sweep seq")
    if dim == "g":
        if any(w.variant != "gqa" for w in workloads):
            raise CostModelError("sweeping groups needs variant gqa")
        bad = [int(x) for x in values if x < 1 or workloads[0].h % x]
        if bad:
            raise CostModelError(f"groups {bad[:10]} do not divide heads {workloads[0].h}")
    lowest = int(min(values)) if isinstance(values, list) else int(values.min())
    if dim != "m" and lowest < 1:
        raise CostModelError(f"{name} values must be >= 1, got {lowest}")
    linked = ("m",) if dim == "n" and mode == "batched" and all(w.m == w.n for w in workloads) else ()
    return dim, linked


class Sweep(Report):
    """A sweep of one parameter for one or more workloads on one device; ``str()`` is the table (``*``
    where weights and KV cache do not fit), ``model_dump()`` the JSON, ``records`` one dict per point."""

    hardware: DeviceSummary
    parameter: str
    dim: str
    linked: tuple[str, ...]  # dimensions that take the swept values too (m with n in a batched prefill)
    values: list[int]
    workloads: list[Workload]
    records: list[dict]

    def __str__(self) -> str:
        from costmodel.render.text import sweep_table

        return sweep_table(self)


#: Points evaluated (and written) at a time: a sweep's memory does not grow with its length.
CHUNK = 1 << 15


class SweepPlan(BaseModel):
    """A checked sweep, before any point is evaluated: :meth:`chunks` yields its records a chunk at a time."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    hw: HardwareProfile
    workloads: list[Workload]
    parameter: str
    dim: str
    linked: tuple[str, ...]
    values: object  # numpy int64 array
    overlap: str
    model: object  # costmodel.price.origin.TimeModel

    def chunks(self, size: int = CHUNK):
        """Lists of records, in the order of :attr:`Sweep.records` (each workload's values in turn)."""
        dim, parameter = self.dim, self.parameter
        for w in self.workloads:
            for start in range(0, len(self.values), size):
                values = self.values[start : start + size]
                r = sweep_arrays(w, self.hw, dim, values, self.overlap, self.linked, self.model)
                out = []
                for i, x in enumerate(values.tolist()):
                    b = float(r["b"][i]) if dim == "b" else w.b
                    n = float(r["n"][i]) if dim == "n" else w.n
                    time = float(r["time_s"][i])
                    low, high = float(r["low_s"][i]), float(r["high_s"][i])
                    per_token = {"incremental": time, "generate": time / n}.get(w.mode)
                    tokens = b if w.mode == "incremental" else b * n
                    out.append(
                        {
                            parameter: x,
                            "variant": w.variant,
                            "g": int(r["g"][i]) if dim == "g" else w.g,
                            "time_s": time,
                            "per_token_s": per_token,
                            "tokens_per_s": tokens / time,
                            "low_s": low if low == low else None,
                            "high_s": high if high == high else None,
                            "flops": float(r["flops"][i]),
                            "bytes": float(r["bytes"][i]),
                            "kv_cache_bytes": float(r["kv_cache_bytes"][i]),
                            "fits": bool(r["fits"][i]),
                        }
                    )
                yield out


def plan_sweep(
    workloads: Workload | list[Workload],
    hw: HardwareProfile,
    parameter: str,
    values: list[int] | str,
    overlap: str = DEFAULTS["overlap"],
    max_points: int = MAX_POINTS,
    timing: str = DEFAULTS["timing"],
    without=(),
) -> SweepPlan:
    """Every check of :func:`sweep`, and the values as an array; nothing evaluated yet."""
    import numpy as np

    workloads = [workloads] if isinstance(workloads, Workload) else workloads
    if not isinstance(workloads, (list, tuple)) or not workloads:
        raise CostModelError(f"workloads must be a Workload or a non-empty list of them, got {workloads!r}"[:200])
    for w in workloads:
        checks.instance("workloads", w, Workload, "a Workload (Workload.create(...))")
    checks.instance("hw", hw, HardwareProfile, "a HardwareProfile (load_profile(...))")
    parameter = checks.text("parameter", parameter)
    max_points = checks.count("max_points", max_points)
    if isinstance(values, str):
        values = range_array(values, max_points)
    elif isinstance(values, (list, tuple)) or hasattr(values, "__array__"):
        if len(values) > max_points:
            raise _too_many(f"{len(values)} values", len(values), max_points)
        values = np.asarray(
            [checks.count("values", x, least=0) for x in (values.tolist() if hasattr(values, "tolist") else values)],
            dtype=np.int64,
        )
    else:
        raise CostModelError(
            f"values must be a list of integers or a range such as '128:32768:x2', got {values!r}"[:200]
        )
    if not len(values):
        raise CostModelError("a sweep needs at least one value")
    overlap = choice("overlap", overlap, OVERLAPS)
    model = time_model(hw, timing, without)
    parameter = parameter.replace("-", "_")
    dim, linked = check_sweep(workloads, parameter, values)
    return SweepPlan(
        hw=hw,
        workloads=list(workloads),
        parameter=parameter,
        dim=dim,
        linked=linked,
        values=values,
        overlap=overlap,
        model=model,
    )


def sweep(
    workloads: Workload | list[Workload],
    hw: HardwareProfile,
    parameter: str,
    values: list[int] | str,
    overlap: str = DEFAULTS["overlap"],
    max_points: int = MAX_POINTS,
    timing: str = DEFAULTS["timing"],
    without=(),
) -> Sweep:
    """Predict ``workloads`` at every value of ``parameter`` (a name of :meth:`Workload.create`: batch,
    context, seq, groups, ...); ``values`` is a list or a range (``"128:32768:x2"``). The records are held in
    memory; :func:`plan_sweep` yields them a chunk at a time."""
    return swept(plan_sweep(workloads, hw, parameter, values, overlap, max_points, timing, without))


def swept(plan: SweepPlan) -> Sweep:
    """Every record of a planned sweep, held in memory, as a :class:`Sweep` report."""
    from costmodel.attention.roofline import hardware_summary

    records = [r for chunk in plan.chunks() for r in chunk]
    return Sweep.model_construct(
        hardware=hardware_summary(plan.hw, plan.workloads[0].dtype, plan.model),
        parameter=plan.parameter,
        dim=plan.dim,
        linked=plan.linked,
        values=plan.values.tolist(),
        workloads=plan.workloads,
        records=records,
    )


#: What a bin of :class:`Envelope` keeps: the record of each field's least or most value (its first, on a tie).
PICKS = (
    ("time_s", min),
    ("time_s", max),
    ("tokens_per_s", min),
    ("tokens_per_s", max),
    ("low_s", min),
    ("high_s", max),
)


class Envelope:
    """The records of a long sweep that a figure of it needs, gathered a chunk at a time: per variant, in each of
    ``bins`` bins of the swept value (log-spaced where the values span more than a hundredfold), the records of the
    least and the most latency and tokens/s and of the widest measured range, and the last record that fits in
    memory with the first that does not. A variant of at most ``bins`` points keeps every record. Drawn from
    these, a figure shows the envelope every point would, while memory stays that of a few thousand records."""

    def __init__(self, values, name: str, bins: int = 2000):
        import numpy as np

        lo, hi = float(max(min(values), 1)), float(max(values))
        self.name, self.bins, self.few = name, bins, len(values) <= bins
        self.log = hi / lo > 100
        self.lo, self.width = (np.log(lo), np.log(hi / lo) / bins) if self.log else (lo, max(hi - lo, 1) / bins)
        self.kept: dict = {}  # (variant, bin) -> {record id: record}
        self.edges: dict = {}  # variant -> [last record that fits, first that does not]

    def _bin(self, x: float) -> int:
        import math

        at = (math.log(max(x, 1)) if self.log else x) - self.lo
        return min(int(at / self.width), self.bins - 1) if self.width > 0 else 0

    def add(self, chunk: list[dict]) -> None:
        for r in chunk:
            v = r["variant"]
            edge = self.edges.setdefault(v, [None, None])
            if r["fits"]:
                edge[0] = r
            elif edge[1] is None:
                edge[1] = r
            key = (v, r[self.name] if self.few else self._bin(r[self.name]))
            kept = self.kept.setdefault(key, {})
            if self.few:
                kept[id(r)] = r
                continue
            for field, pick in PICKS:
                value, best = r.get(field), kept.get((field, pick))
                if value is not None and (best is None or pick(best[field], value) != best[field]):
                    kept[(field, pick)] = r

    def records(self) -> list[dict]:
        """The records kept, each variant's in the order of the swept value."""
        out: dict = {}
        for (v, _), kept in self.kept.items():
            for r in kept.values():
                out.setdefault(v, {})[id(r)] = r
        for v, (fits, over) in self.edges.items():
            for r in (fits, over):
                if r is not None:
                    out.setdefault(v, {})[id(r)] = r
        return [r for v in out for r in sorted(out[v].values(), key=lambda r: r[self.name])]
