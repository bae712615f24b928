"""How far a prediction is expected to be off, measured: the ratio measured / predicted of published kernel
timings, per kernel class and per *route* (how the device's parameters for that class came to be):

- ``fitted``: the device's own parameters, fitted on these rows (in-sample; the fits' half-split held-out errors
  are within a point of them, scripts/fit_published.py --holdout);
- ``across``: parameters fitted on a GPU of another generation, carried over by
  :data:`costmodel.price.origin.TRANSFER_RULE` (A100, H100 and B200 each priced from each other's fit);
- ``datasheet``: no fitted parameters, the datasheet roofline with the profile's launch cost per kernel.

:func:`ratios` collects them, :func:`quantiles` reduces a set to its p10, median and p90, and :func:`coverage` says
what share of other ratios a band holds. ``scripts/error_bands.py`` writes the bands shipped in
``costmodel/error_bands.yaml`` and scores each band on the GPU its data left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.hardware.mechanisms import MECHANISMS
from costmodel.price.bands import served_keys
from costmodel.price.op import Conventions, KernelOp, price
from costmodel.price.origin import TimeModel, resolve
from costmodel.validation.fit import unfitted_write_s

#: The GPUs with published kernel tables, each priced from the others' fits.
GPUS = ("a100_80gb_sxm", "h100_sxm", "b200")
#: The most points a set of ratios is resampled to when sets are pooled.
RESAMPLE = 2000
#: The quantiles a band spans.
LOW, HIGH = 10, 90


@dataclass(frozen=True)
class Ratios:
    """measured / predicted of the rows of one class on one GPU (``device``), priced by one route, from the
    parameters of ``source`` (the device itself when fitted; None on the datasheet route)."""

    route: str
    cls: str
    device: str
    source: str | None
    values: np.ndarray


def _times(table, hw, resolved) -> np.ndarray:
    """Predicted seconds of a table's rows with ``resolved`` parameters (None: the datasheet roofline)."""
    op = KernelOp(table.op_class, table.op_class, table.dtype, table.flops, table.nbytes, kernel=table.priced_class)
    conv = (
        Conventions(TimeModel(resolved, table.timing, frozenset(MECHANISMS)))
        if resolved is not None
        else Conventions.datasheet()
    )
    t = np.broadcast_to(np.asarray(price(op, table.shape, hw, conv).time, float), table.measured_s.shape)
    t = t * (table.count if table.count is not None else 1)
    if resolved is None:
        return t
    return t + unfitted_write_s(table, hw, resolved.get(table.priced_class), resolved.get("gemm"))


def ratios(tables, profiles: dict) -> list[Ratios]:
    """Every route's ratios over ``tables`` (published tables, :func:`costmodel.validation.published.read_folder`)
    with ``profiles`` (profile id -> fitted HardwareProfile) for the GPUs of :data:`GPUS` present."""
    out = []
    for dst, hw in profiles.items():
        mine = [t for t in tables if t.profile == dst]
        bare = hw.model_copy(update={"efficiency": None})
        for timing in sorted({t.timing for t in mine}):
            rows = [t for t in mine if t.timing == timing]
            own = resolve(hw, timing, reference=None)
            routes = [("fitted", dst, own)]
            routes += [
                ("across", src, resolve(bare, timing, reference=ref))
                for src, ref in profiles.items()
                if src != dst and ref.architecture.generation != hw.architecture.generation
            ]
            for route, src, res in routes:
                if res is None:
                    continue
                for cls in sorted({t.priced_class for t in rows}):
                    origin = res.origin.get(cls)
                    kind = "fitted" if route == "fitted" else "transferred"
                    if (
                        origin is None
                        or origin.kind != kind
                        or origin.device != src
                        or cls not in profiles[src].efficiency.classes
                    ):
                        continue  # this route does not price the class from that device's own fit of it
                    got = [t.measured_s / _times(t, hw, res) for t in rows if t.priced_class == cls]
                    out.append(Ratios(route, cls, dst, src, np.concatenate(got)))
            for cls in sorted({t.priced_class for t in rows}):
                got = [t.measured_s / _times(t, bare, None) for t in rows if t.priced_class == cls]
                out.append(Ratios("datasheet", cls, dst, None, np.concatenate(got)))
    return out


#: The share of held-out rows a calibrated range should hold.
TARGET = 0.8
#: The percentiles a range may leave out at each end: the narrowest range (the most left out in all, then the
#: narrowest over every row) whose held-out coverage reaches :data:`TARGET` is shipped (:func:`_narrowest`).
TAIL_GRID = (10, 9, 8, 7, 6, 5, 4, 3, 2.5, 2, 1.5, 1, 0.5)
#: The p10-p90 range's tails (below, above), uncalibrated.
PLAIN = (LOW, 100 - HIGH)
#: Routes whose ranges are symmetric in the log of measured / predicted, 1 / x to x: a transfer across generations
#: errs by a bias of each pair of GPUs whose sign turns with the direction (the H100's per-tensor fp8 GEMMs priced
#: from the B200's fit run at 0.70 of the predicted time at the median, the B200's from the H100's at 1.32), so
#: which side of the prediction a GPU no fit saw falls on is not known. Their tails are one number: the percent of
#: the error either way, |log(measured / predicted)|, left out.
SYMMETRIC = ("across",)
#: The percents of a symmetric range's error left out, the most first (:func:`kernel_tails`).
SYMMETRIC_GRID = (30, 25, 20, 18, 16, 14, 12, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)


def quantiles(values, tails: tuple[float, ...] = PLAIN) -> dict:
    """The range of a set of ratios that leaves ``tails[0]`` percent out below and ``tails[1]`` above: its size,
    low end, median and high end (p10, median, p90 by default); for one number, ``(left,)``, the range 1 / x to x
    that leaves ``left`` percent of the error either way out (:data:`SYMMETRIC`), beside the median."""
    v = np.asarray(values, float)
    if len(tails) == 1:
        x = float(np.exp(np.percentile(np.abs(np.log(v)), 100 - tails[0])))
        return {"n": int(v.size), "low": 1 / x, "p50": float(np.median(v)), "high": x}
    lo, mid, hi = np.percentile(v, [tails[0], 50, 100 - tails[1]])
    return {"n": int(v.size), "low": float(lo), "p50": float(mid), "high": float(hi)}


def rounded(q: dict) -> dict:
    """A :func:`quantiles` result as the shipped files hold it (three decimals)."""
    return {"n": q["n"], **{k: round(q[k], 3) for k in ("low", "p50", "high")}}


def coverage(band: dict, values) -> float:
    """The share of ``values`` inside ``[band['low'], band['high']]``."""
    v = np.asarray(values, float)
    return float(np.mean((v >= band["low"]) & (v <= band["high"])))


def _ends(values) -> tuple[np.ndarray, np.ndarray]:
    """A set's low ends and high ends at every tail of :data:`TAIL_GRID`."""
    grid = np.array(TAIL_GRID, float)
    return np.percentile(values, grid), np.percentile(values, 100 - grid)


def _narrowest(lows, highs, weights, every) -> tuple[float, float]:
    """Of the (below, above) pairs of :data:`TAIL_GRID`, the one that leaves the most out in all (then gives the
    narrowest range of ``every``, in log ratio) while the ``weights``-weighted share of held-out values inside it
    reaches :data:`TARGET`; ``lows[k, i]`` says value k is at or above its range's low end at tail i, ``highs[k, j]``
    at or below its high end at tail j. The widest pair where none reaches it (or nothing was held out)."""
    lows, highs = np.asarray(lows, bool), np.asarray(highs, bool)
    w = np.asarray(weights, float)
    best = None
    for i, below in enumerate(TAIL_GRID if lows.size else ()):
        for j, above in enumerate(TAIL_GRID):
            if np.sum(w * (lows[:, i] & highs[:, j])) / np.sum(w) < TARGET:
                continue
            width = float(np.log(np.percentile(every, 100 - above) / np.percentile(every, below)))
            rank = (below + above, -width)
            if best is None or rank > best[0]:
                best = (rank, (below, above))
    return best[1] if best is not None else (TAIL_GRID[-1], TAIL_GRID[-1])


def pooled(found: list[Ratios], route: str, cls: str | None = None, devices=None, exclude=None) -> np.ndarray:
    """The ratios of one route (and class; None: every class), over ``devices`` (None: all) except ``exclude``,
    each (class, device, source) set weighted equally: a class on one GPU counts as much as on another whatever
    its rows, by resampling each set to the size of the smallest."""
    sets = [
        r.values
        for r in found
        if r.route == route
        and (cls is None or r.cls == cls)
        and (devices is None or r.device in devices)
        and r.device != exclude
    ]
    if not sets:
        return np.array([])
    size = min(min(len(s) for s in sets), RESAMPLE)
    return np.concatenate([np.quantile(s, (np.arange(size) + 0.5) / size) for s in sets])


def _held_sets(found: list[Ratios], route: str, gpus, only=None):
    """(GPU, its rows of a class of ``route``, the same class's rows of the other GPUs of ``gpus``: the route's every
    class where none has it) for each GPU of ``only`` (all of ``gpus`` where None) and each class it has; a class
    with no other GPU's rows at all is left out."""
    for g in only or gpus:
        others = [x for x in gpus if x != g]
        for cls in sorted({r.cls for r in found if r.route == route and r.device == g}):
            other = pooled(found, route, cls, devices=others)
            other = other if other.size else pooled(found, route, devices=others)
            if other.size:
                yield g, pooled(found, route, cls, devices=(g,)), other


def kernel_held_out(found: list[Ratios], route: str, tails: tuple[float, ...] = PLAIN, gpus=GPUS, only=None) -> dict:
    """Per GPU of ``gpus`` (or of ``only``): the share of its rows of ``route`` inside the band of the same class
    derived from the other GPUs' rows at ``tails`` (two-sided, or one number: :func:`quantiles`; the route-wide band
    where no other GPU has the class); None where it has none."""
    inside = {g: 0.0 for g in only or gpus}
    total = {g: 0 for g in only or gpus}
    for g, mine, other in _held_sets(found, route, gpus, only):
        inside[g] += coverage(quantiles(other, tails), mine) * mine.size
        total[g] += mine.size
    return {g: inside[g] / total[g] if total[g] else None for g in inside}


def kernel_tails(found: list[Ratios], route: str, gpus=GPUS) -> tuple[float, ...]:
    """The calibrated (below, above) tails of a route's bands (:func:`_narrowest`): each GPU of ``gpus``, weighing
    equally, scored against the bands derived from the others; for a route of :data:`SYMMETRIC`, ``(left,)``: the
    most of :data:`SYMMETRIC_GRID` left out whose ranges hold :data:`TARGET` so scored."""
    sets = list(_held_sets(found, route, gpus))
    symmetric = route in SYMMETRIC
    if not sets:  # no GPU has another to be scored against: the widest
        return (SYMMETRIC_GRID[-1],) if symmetric else (TAIL_GRID[-1], TAIL_GRID[-1])
    rows = {g: sum(mine.size for h, mine, _ in sets if h == g) for g, _, _ in sets}
    if symmetric:
        for left in SYMMETRIC_GRID:
            held = sum(coverage(quantiles(other, (left,)), mine) * mine.size / rows[g] for g, mine, other in sets)
            if held / len(rows) >= TARGET:
                return (left,)
        return (SYMMETRIC_GRID[-1],)
    ends = [(mine, *_ends(other)) for _, mine, other in sets]
    return _narrowest(
        np.concatenate([mine[:, None] >= lo[None, :] for mine, lo, _ in ends]),
        np.concatenate([mine[:, None] <= hi[None, :] for mine, _, hi in ends]),
        np.concatenate([np.full(mine.size, 1.0 / rows[g]) for g, mine, _ in sets]),
        pooled(found, route, devices=gpus),
    )


def kernel_nested(found: list[Ratios], route: str, gpus=GPUS) -> dict:
    """Per GPU: the share of its rows inside bands whose tails (:func:`kernel_tails` over the other GPUs) and ends
    were both derived without it."""
    return {
        g: kernel_held_out(found, route, kernel_tails(found, route, [x for x in gpus if x != g]), gpus, only=(g,))[g]
        for g in gpus
    }


@dataclass(frozen=True)
class Served:
    """measured / predicted TTFT and TPOT of one measured deployment (a row of ``validate --serving``)."""

    engine: str
    kind: str  # "dense" or "moe"
    mode: str  # "agg" or "disagg"
    model: str
    ttft: float
    tpot: float


def served(rows) -> list[Served]:
    """The rows of a ``validate --serving`` report as :class:`Served` ratios."""
    from costmodel.model.presets import load_model

    kinds = {}
    out = []
    for r in rows:
        if r["model_path"] not in kinds:
            kinds[r["model_path"]] = "moe" if load_model(r["model_path"]).moe is not None else "dense"
        out.append(
            Served(
                r["backend"],
                kinds[r["model_path"]],
                r["mode"],
                r["model_path"],
                r["measured_ttft_s"] / r["predicted_ttft_s"],
                r["measured_tpot_s"] / r["predicted_tpot_s"],
            )
        )
    return out


#: The fewest rows a served range is taken from; a key with fewer takes the next wider one.
MIN_ROWS = 20
METRICS = ("ttft", "tpot")


def _groups(found: list[Served], exclude_model: str | None = None) -> dict:
    groups: dict[tuple, list[Served]] = {}
    for s in found:
        if s.model != exclude_model:
            for key in served_keys(s.engine, s.kind, s.mode):
                groups.setdefault(key, []).append(s)
    return {key: rs for key, rs in groups.items() if len(rs) >= MIN_ROWS}


def served_sets(found: list[Served], exclude_model: str | None = None, tails: dict | None = None) -> dict:
    """Per key of :func:`served_keys` with at least :data:`MIN_ROWS` rows: the TTFT and TPOT ranges, each leaving
    ``tails[metric]`` (below, above) percent out (p10-p90 by default)."""
    tails = tails or {m: PLAIN for m in METRICS}
    return {
        key: {m: quantiles([getattr(s, m) for s in rs], tails[m]) for m in METRICS}
        for key, rs in _groups(found, exclude_model).items()
    }


def _held_out(found: list[Served], ranges_without) -> dict:
    """Each model's rows scored against ``ranges_without(model)`` (its engine, kind and mode, else the next wider
    key): the share inside, per engine and over all, for TTFT and TPOT."""
    inside: dict[str, list] = {}
    for model in sorted({s.model for s in found}):
        sets = ranges_without(model)
        for s in (s for s in found if s.model == model):
            key = next(k for k in served_keys(s.engine, s.kind, s.mode) if k in sets)
            hit = [coverage(sets[key][m], [getattr(s, m)]) for m in METRICS]
            for group in (s.engine, "all"):
                inside.setdefault(group, []).append(hit)
    return {
        g: {"n": len(v), "ttft": float(np.mean([h[0] for h in v])), "tpot": float(np.mean([h[1] for h in v]))}
        for g, v in inside.items()
    }


def served_held_out(found: list[Served], tails: dict | None = None) -> dict:
    """Each model's rows scored against the ranges derived without them at ``tails`` (p10-p90 by default)."""
    return _held_out(found, lambda model: served_sets(found, exclude_model=model, tails=tails))


def calibrated_tails(found: list[Served]) -> dict:
    """Per metric, the calibrated (below, above) tails of the served ranges (:func:`_narrowest`): every row of each
    model, weighing equally, scored against the ranges derived without that model."""
    models = sorted({s.model for s in found})
    out = {}
    for m in METRICS:
        lows, highs = [], []
        for model in models:
            ends = {key: _ends([getattr(s, m) for s in rs]) for key, rs in _groups(found, model).items()}
            for s in (s for s in found if s.model == model):
                key = next((k for k in served_keys(s.engine, s.kind, s.mode) if k in ends), None)
                if key is not None:  # else no other model's rows to derive a range from
                    value = getattr(s, m)
                    lows.append(ends[key][0] <= value)
                    highs.append(value <= ends[key][1])
        grid = (-1, len(TAIL_GRID))
        out[m] = _narrowest(
            np.reshape(lows, grid), np.reshape(highs, grid), np.ones(len(lows)), [getattr(s, m) for s in found]
        )
    return out


def served_nested(found: list[Served]) -> dict:
    """The coverage of calibrated ranges on models neither the calibration nor the ranges saw: each model's rows
    against the ranges derived without it at the tails :func:`calibrated_tails` chooses without it."""

    def ranges_without(model):
        others = [s for s in found if s.model != model]
        return served_sets(others, tails=calibrated_tails(others))

    return _held_out(found, ranges_without)
