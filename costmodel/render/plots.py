"""Figures for design docs: rooflines, latency sweeps, and predicted against measured time.

The data each figure draws is computed by the producers (:mod:`costmodel.attention.figures`: roofline points,
memory limits), which tests check against the model; these functions only draw it. matplotlib (Agg backend,
headless) is imported only when a figure is drawn. Every drawn artist carries a ``gid`` naming what it shows.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from costmodel.core.errors import CostModelError
from costmodel.core.files import atomic_path, check_folder
from costmodel.core.mpl import pyplot as _pyplot
from costmodel.render.text import si

if TYPE_CHECKING:  # annotations only: a renderer takes what it draws
    from costmodel.attention.workload import Workload
    from costmodel.hardware.profile import HardwareProfile

FORMATS = (".png", ".svg", ".pdf", ".html")
COLORS = {"mha": "#1f77b4", "gqa": "#ff7f0e", "mqa": "#2ca02c"}
MARKERS = {"incremental": "o", "batched": "s", "generate": "D"}
NAMES = {"mha": "MHA", "gqa": "GQA", "mqa": "MQA"}


def check_output(path: str) -> str:
    check_folder(path)
    if path == "-":
        return ".png"  # a figure on standard output is a PNG
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in FORMATS:
        raise CostModelError(f"cannot save {path!r}: the suffix must be one of {', '.join(FORMATS)}")
    return suffix


def save(fig, path: str, data=None) -> None:
    """Save by suffix through a temporary file, so an interrupted run leaves no half-written figure; ``.html``: one
    self-contained page of the figure, the command that drew it and ``data`` (what it plots, as JSON)."""
    suffix = check_output(path)
    if suffix == ".html":
        from costmodel.core.files import write_text
        from costmodel.render.html import figure_page

        write_text(path, figure_page(fig, data))
        return
    # the same figure gives the same bytes: no dates in SVG or PDF (its ids from core.mpl's fixed salt)
    metadata = {".svg": {"Date": None}, ".pdf": {"CreationDate": None, "ModDate": None}}.get(suffix)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=suffix[1:], bbox_inches="tight", metadata=metadata)


def draw_roofline(hws: list[HardwareProfile], workloads: list[Workload], title: str, points: list):
    """Log-log attainable FLOP/s against intensity: each device's roofs, every op of ``points``
    (:func:`costmodel.attention.figures.roofline_points` on the first device) as a marker."""
    plt = _pyplot()

    dtype = workloads[0].dtype
    xs = [p.intensity for p in points] + [hw.ridge_point(dtype) for hw in hws]
    lo, hi = min(xs) / 4, max(xs) * 8
    fig, ax = plt.subplots(figsize=(10, 5.8), layout="constrained")
    roof_handles = [_roof(ax, i, hw, dtype, lo, hi) for i, hw in enumerate(hws)]
    # concentric markers: MHA largest, MQA smallest, so variants at one point all stay visible
    size = {"mha": 11, "gqa": 8, "mqa": 5}
    labels: dict[tuple, list[str]] = {}
    for p in sorted(points, key=lambda q: -size[q.variant]):
        ax.plot(
            [p.intensity],
            [p.attainable],
            ls="none",
            marker=MARKERS[p.mode],
            ms=size[p.variant],
            mfc=COLORS[p.variant],
            mec="white",
            mew=0.7,
            gid=f"op:{p.variant}:{p.mode}:{p.op}",
        )
        key = (round(math.log10(p.intensity), 2), round(math.log10(p.attainable), 2))
        if _short(p.op) not in labels.setdefault(key, []):
            labels[key].append(_short(p.op))
    _op_labels(ax, labels)
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(lo, hi),
        xlabel="arithmetic intensity (FLOP/byte)",
        ylabel="attainable throughput (FLOP/s)",
        title=title,
    )
    ax.grid(True, which="major", alpha=0.3)
    handles = _op_handles(workloads)
    fig.legend(
        handles=roof_handles + handles,
        loc="outside right upper",
        frameon=False,
        fontsize=8,
        title=f"roofs; ops on {hws[0].name}" if len(hws) > 1 else "roof and ops",
    )
    return fig


def _roof(ax, i: int, hw: HardwareProfile, dtype: str, lo: float, hi: float):
    """Device ``i``'s memory and compute roofs and its ridge, drawn; its legend entry."""
    from matplotlib.lines import Line2D

    peak, bw, ridge = hw.peak(dtype), hw.bandwidth, hw.ridge_point(dtype)
    style = dict(color="0.15" if i == 0 else f"C{i + 4}", lw=1.6, ls="-" if i == 0 else "--")
    ax.plot([lo, ridge], [lo * bw, peak], gid=f"memory_roof:{hw.id}", **style)
    ax.plot([ridge, hi], [peak, peak], gid=f"compute_roof:{hw.id}", **style)
    ax.plot([ridge], [peak], marker="|", ms=12, gid=f"ridge:{hw.id}", **style)
    ax.annotate(
        f"ridge {ridge:.0f}",
        (ridge, peak),
        xytext=(0, 8),
        textcoords="offset points",
        ha="center",
        fontsize=7.5,
        color=style["color"],
    )
    ax.annotate(
        si(bw, "B/s"), (lo, lo * bw), xytext=(4, 7), textcoords="offset points", fontsize=7.5, color=style["color"]
    )
    return Line2D(
        [],
        [],
        **style,
        label=f"{hw.name}\n{si(peak, 'FLOP/s')} {dtype}, {si(bw, 'B/s')}, ridge {ridge:.0f} FLOP/B",
    )


def _op_labels(ax, labels: dict) -> None:
    """The ops' names beside their markers, each moved down while it would overlap one already placed."""
    placed: list[tuple[float, float]] = []
    for (lx, ly), ops in sorted(labels.items()):
        # move a label down while it would overlap one already placed (0.45 decade wide, 0.12 tall)
        y = ly
        while any(abs(lx - px) < 0.45 and abs(y - py) < 0.12 for px, py in placed):
            y -= 0.12
        placed.append((lx, y))
        ax.annotate(
            ", ".join(ops),
            (10**lx, 10**ly),
            xytext=(10 ** (lx + 0.06), 10 ** (y - 0.03)),
            textcoords="data",
            fontsize=7,
            color="0.25",
            va="top",
        )


def _op_handles(workloads: list[Workload]) -> list:
    """Legend entries of the variants (colours) and modes (markers)."""
    from matplotlib.lines import Line2D

    handles = [
        Line2D(
            [],
            [],
            ls="none",
            marker="o",
            ms=7,
            mfc=COLORS[v],
            mec="white",
            label=f"{NAMES[v]} (g={next(w.g for w in workloads if w.variant == v)})",
        )
        for v in dict.fromkeys(w.variant for w in workloads)
    ]
    handles += [
        Line2D(
            [],
            [],
            ls="none",
            marker=MARKERS[m],
            ms=7,
            mfc="0.5",
            mec="white",
            label={"incremental": "decode step", "batched": "prefill (batched)", "generate": "generate"}[m],
        )
        for m in dict.fromkeys(w.mode for w in workloads)
    ]
    return handles


def _short(op: str) -> str:
    return op.replace("weighted_sum", "w_sum").replace("_proj", "")


def draw_sweep(
    hw: HardwareProfile,
    workloads: list[Workload],
    name: str,
    dim: str,
    values,
    records: list[dict],
    limits: list,
    title: str,
    more=(),
):
    """Latency (and tokens/s when decoding) against the swept dimension, one curve per variant; ``more``:
    (device, records, limits) of further devices, drawn in the same colours with other line styles."""
    plt = _pyplot()

    decoding = workloads[0].mode != "batched"
    fig, axes = plt.subplots(
        1, 2 if decoding else 1, figsize=(11 if decoding else 6.5, 4.6), layout="constrained", squeeze=False
    )
    span = max(values) / max(min(values), 1)
    per = {
        "incremental": "per decode step",
        "generate": f"for {workloads[0].n} decode steps",
        "batched": "per prefill",
    }[workloads[0].mode]
    runs = [(hw, records, limits), *more]
    styles = ["-", "--", "-.", (0, (1, 1))]
    for k, (device, device_records, device_limits) in enumerate(runs):
        tag = f"{device.id}: " if len(runs) > 1 else ""
        gid_tag = f"{device.id}:" if len(runs) > 1 else ""
        for w, limit in zip(workloads, device_limits):
            rec = [r for r in device_records if r["variant"] == w.variant]
            label = tag + f"{NAMES[w.variant]}" + (f" (g={w.g})" if name != "groups" else "")
            series = [("time_s", 1e3, f"latency {per} (ms)")]
            if decoding:
                series.append(("tokens_per_s", 1.0, "throughput (tokens/s)"))
            for ax, (key, scale, ylabel) in zip(axes[0], series):
                style = (styles[k % len(styles)], label, gid_tag, len(runs) == 1)
                _sweep_curve(ax, key, scale, ylabel, w, limit, rec, name, dim, span, style)
    capacities = ", ".join(dict.fromkeys(si(d.capacity, "B") for d, _, _ in runs))
    axes[0][0].plot(
        [], [], marker="X", ms=9, color="0.5", mec="black", ls="none", label=f"last point that fits in {capacities}"
    )
    axes[0][0].plot([], [], ls=":", color="0.5", label="does not fit")
    if len(runs) == 1 and records and records[0].get("low_s") is not None:
        axes[0][0].fill_between(
            [],
            [],
            [],
            color="0.5",
            alpha=0.15,
            lw=0,
            label="measured range of measured / predicted (costmodel.price.bands)",
        )
    axes[0][0].legend(loc="best", fontsize=8)
    fig.suptitle(title)
    return fig


def _sweep_curve(ax, key: str, scale: float, ylabel: str, w, limit, rec: list[dict], name: str, dim: str, span, style):
    """One variant's ``key`` (latency or tokens/s) against the swept values: the points that fit, the measured
    range (one device alone), those past the memory limit dotted, the last that fits marked; ``style``: (line
    style, label, gid prefix, whether this device is drawn alone)."""
    ls, label, gid_tag, alone = style
    xs = [r[name] for r in rec]
    ys = [r[key] * scale for r in rec]
    fit_x = [x for x, r in zip(xs, rec) if r["fits"]]
    ax.plot(
        fit_x,
        [y for y, r in zip(ys, rec) if r["fits"]],
        marker=MARKERS[w.mode],
        ms=4,
        color=COLORS[w.variant],
        ls=ls,
        label=label,
        gid=f"curve:{gid_tag}{w.variant}:{key}",
    )
    if key == "time_s" and all(r.get("low_s") is not None for r in rec) and alone:
        ax.fill_between(
            xs,
            [r["low_s"] * scale for r in rec],
            [r["high_s"] * scale for r in rec],
            color=COLORS[w.variant],
            alpha=0.15,
            lw=0,
            gid=f"band:{w.variant}:{key}",
        )
    over = [(x, y) for x, y, r in zip(xs, ys, rec) if not r["fits"]]
    if over:
        if fit_x:
            over.insert(0, (fit_x[-1], ys[len(fit_x) - 1]))
        ax.plot(
            *zip(*over),
            ls=":",
            color=COLORS[w.variant],
            alpha=0.6,
            gid=f"no_fit:{gid_tag}{w.variant}:{key}",
        )
    if limit.x is not None:
        y = limit.time_s * scale if key == "time_s" else _tokens(w, name, limit.x, limit.time_s)
        ax.plot(
            [limit.x],
            [y],
            marker="X",
            ms=10,
            color=COLORS[w.variant],
            mec="black",
            ls="none",
            gid=f"memory_limit:{gid_tag}{w.variant}:{key}",
        )
    ax.set(xlabel=f"{name} ({dim})", ylabel=ylabel)
    if span >= 10:
        from matplotlib.ticker import FuncFormatter

        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(count_of))
    if key == "time_s" and max(ys) / min(ys) >= 10 or key == "tokens_per_s" and max(ys) / min(ys) >= 10:
        ax.set_yscale("log")
    ax.grid(True, which="major", alpha=0.3)


def count_of(x: float, _pos=None) -> str:
    """Axis ticks as counts: 128, 2k, 32k, 1M."""
    for scale, suffix in ((2**20, "M"), (2**10, "k")):
        if x >= scale and x % scale == 0:
            return f"{x / scale:g}{suffix}"
    return f"{x:g}"


def _tokens(w: Workload, name: str, x: float, time_s: float) -> float:
    b = x if name == "batch" else w.b
    n = x if name == "seq" else w.n
    return (b if w.mode == "incremental" else b * n) / time_s
