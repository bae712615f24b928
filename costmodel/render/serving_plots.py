"""Served models' figures: throughput against latency under load, measured against predicted, and per-group errors."""

from __future__ import annotations

from costmodel.core.errors import CostModelError
from costmodel.core.mpl import pyplot as _pyplot
from costmodel.render.plots import COLORS, count_of


def draw_predicted_vs_measured(rows: list[dict], title: str, band: float = 0.2):
    """Log-log predicted against measured time, the y = x line and a +-``band`` region.

    ``rows``: dicts with ``measured_s``, ``predicted_s`` and ``group`` (one colour per group).
    """
    plt = _pyplot()
    import numpy as np

    rows = [r for r in rows if r["measured_s"] > 0 and r["predicted_s"] > 0]
    if not rows:
        raise CostModelError("nothing to plot: no row has a positive measured and predicted time")
    fig, ax = plt.subplots(figsize=(6.2, 5.6), layout="constrained")
    values = [r[k] for r in rows for k in ("measured_s", "predicted_s")]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    line = np.geomspace(lo, hi, 50)
    ax.fill_between(line, line * (1 - band), line * (1 + band), color="0.85", gid="band", label=f"±{band:.0%}")
    ax.plot(line, line, color="0.3", lw=1, gid="identity", label="predicted = measured")
    for i, group in enumerate(dict.fromkeys(r["group"] for r in rows)):
        sel = [r for r in rows if r["group"] == group]
        ax.plot(
            [r["measured_s"] for r in sel],
            [r["predicted_s"] for r in sel],
            ls="none",
            marker="o",
            ms=5,
            color=f"C{i}",
            alpha=0.8,
            label=group,
            gid=f"points:{group}",
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(lo, hi),
        ylim=(lo, hi),
        xlabel="measured time (s)",
        ylabel="predicted time (s)",
        title=title,
        aspect="equal",
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return fig


def draw_groups(result: dict):
    """Chip-milliseconds per sample against the number of key/value groups (Ainslie et al. 2023, Fig. 6)."""
    plt = _pyplot()

    rows = [r for r in result["rows"] if r.get("chip_ms_per_sample") is not None]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    xs = [r["groups"] for r in rows]
    ax.plot(
        xs,
        [r["chip_ms_per_sample"] for r in rows],
        marker="o",
        color=COLORS["gqa"],
        gid="time_per_sample",
        label="predicted, total",
    )
    ax.plot(
        xs,
        [r["prefill_s"] * 1e3 * r["chip_ms_per_sample"] / ((r["prefill_s"] + r["decode_s"]) * 1e3) for r in rows],
        ls="--",
        color="0.5",
        gid="prefill_share",
        label="of which encoder (prefill)",
    )
    chips = result.get("chips", 1)
    if chips > 1:
        ax.axvline(chips, ls=":", color="0.4", gid="replication_limit")
        ax.annotate(
            f"g <= {chips}: each of the {chips} chips holds\none K/V head (replicated)",
            (chips, 0),
            xytext=(-6, 12),
            textcoords="offset points",
            ha="right",
            fontsize=8,
            color="0.3",
        )
    ax.set_xscale("log", base=2)
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(count_of))
    ax.set(
        xlabel="key/value groups g (1 = MQA, 64 = MHA)",
        ylabel="time per sample (chip-ms)",
        ylim=(0, None),
        title=f"T5 XXL on {chips} TPU v4 chips (tensor parallel): time per sample\n"
        + result["setup"].split(";")[1].strip(),
    )
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return fig


def draw_throughput_latency(records: list[dict], dim: str):
    """Throughput per device against latency per output token, one point per swept value and one curve per
    (device, attention layout); points past the memory limit are hollow on a dotted line, and the last
    point that fits is marked."""
    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(7.6, 4.8), layout="constrained")
    curves = list(dict.fromkeys((r["device"], r["attention"]) for r in records))
    devices = list(dict.fromkeys(r["device"] for r in records))
    for i, (device, attention) in enumerate(curves):
        _curve(
            ax, records, device, attention, f"C{i}", attention if len(devices) == 1 else f"{device}, {attention}", dim
        )
    for r in records[:: max(len(records) // 12, 1)]:
        ax.annotate(
            str(r[dim]),
            (r["tpot_s"] * 1e3, r["tokens_per_s_per_device"]),
            xytext=(3, 3),
            textcoords="offset points",
            fontsize=6.5,
            color="0.4",
        )
    _scales(ax, records)
    first = records[0]
    what = (
        f"requests of {first['input_len']} + {first['output_len']} tokens (mean TPOT)"
        if "e2e_s" in first
        else f"decode step at context {first.get('context')}"
    )
    ax.set(
        xlabel="latency per output token (ms)",
        ylabel="throughput (output tokens/s per device)",
        title=f"{first['model']} on {', '.join(devices)}: throughput against latency over "
        f"{dim.replace('_', ' ')}\n{what}",
    )
    ax.plot([], [], marker="X", ms=9, color="0.5", mec="black", ls="none", label="last point that fits in memory")
    ax.plot([], [], ls=":", marker="o", mfc="white", color="0.5", label="does not fit")
    if any(r.get("tpot_low_s") is not None for r in records):
        ax.errorbar(
            [],
            [],
            xerr=[],
            fmt="none",
            ecolor="0.5",
            alpha=0.5,
            capsize=2,
            label="measured range of the latency (costmodel.price.bands)",
        )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return fig


def _curve(ax, records: list[dict], device: str, attention: str, color: str, label: str, dim: str) -> None:
    """One (device, attention layout)'s points: those that fit joined, their measured ranges, those past the
    memory limit hollow on a dotted line, and the last that fits marked."""
    rec = [r for r in records if r["device"] == device and r["attention"] == attention]
    fit = [r for r in rec if r["fits"]]
    over = [r for r in rec if not r["fits"]]
    ax.plot(
        [r["tpot_s"] * 1e3 for r in fit],
        [r["tokens_per_s_per_device"] for r in fit],
        marker="o",
        ms=4,
        color=color,
        label=label,
        gid=f"curve:{device}:{attention}",
    )
    ranged = [r for r in fit if r.get("tpot_low_s") is not None]
    if ranged:
        ax.errorbar(
            [r["tpot_s"] * 1e3 for r in ranged],
            [r["tokens_per_s_per_device"] for r in ranged],
            xerr=[
                [(r["tpot_s"] - r["tpot_low_s"]) * 1e3 for r in ranged],
                [(r["tpot_high_s"] - r["tpot_s"]) * 1e3 for r in ranged],
            ],
            fmt="none",
            ecolor=color,
            alpha=0.35,
            elinewidth=1,
            capsize=2,
            gid=f"band:{device}:{attention}",
        )
    if over:
        line = ([fit[-1]] if fit else []) + over
        ax.plot(
            [r["tpot_s"] * 1e3 for r in line],
            [r["tokens_per_s_per_device"] for r in line],
            ls=":",
            marker="o",
            ms=4,
            mfc="white",
            color=color,
            alpha=0.7,
            gid=f"no_fit:{device}:{attention}",
        )
    if fit and over:
        last = fit[-1]
        ax.plot(
            [last["tpot_s"] * 1e3],
            [last["tokens_per_s_per_device"]],
            marker="X",
            ms=10,
            color=color,
            mec="black",
            ls="none",
            gid=f"memory_limit:{device}:{attention}",
        )
        ax.annotate(
            f"{dim.replace('_', ' ')} {last[dim]}",
            (last["tpot_s"] * 1e3, last["tokens_per_s_per_device"]),
            xytext=(5, -10),
            textcoords="offset points",
            fontsize=7.5,
            color=color,
        )


def _scales(ax, records: list[dict]) -> None:
    """Log axes where the values span a decade or more, their ticks as plain numbers."""
    xs = [r["tpot_s"] * 1e3 for r in records]
    ys = [r["tokens_per_s_per_device"] for r in records]
    if max(xs) / min(xs) >= 10:
        ax.set_xscale("log")
    if max(ys) / min(ys) >= 10:
        ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        axis.set_minor_formatter(FuncFormatter(lambda v, _pos: f"{v:g}" if str(f"{v:g}")[0] in "25" else ""))


def _configuration(r: dict, precisions: bool = False) -> str:
    """A load curve's configuration in words: devices, layout and engine (a served or a disaggregated report), and
    with ``precisions`` the weights' and the KV cache's dtypes."""
    engine = r["engine"]["name"] if isinstance(r["engine"], dict) else r["engine"]
    if "prefill" in r:  # disaggregated
        pools = [f"{p['workers']}x{p['tp']} {p['hardware']['id']}" for p in (r["prefill"], r["decode"])]
        return f"{r['model']} {' + '.join(pools)} {engine}"
    devices = r["tp"] * r.get("attention_dp", 1) * r.get("pipeline_parallel", 1) * r.get("replicas", 1)
    dtypes = f" {r.get('weight_dtype')}/{r.get('kv_dtype')}" if precisions else ""
    return f"{r['model']} {devices} x {r['hardware']['id']} (TP{r['tp']}) {engine}{dtypes}"


def draw_load_curve(points: list[dict]):
    """A load curve (reports as JSON, one per load point): output tokens/s per GPU against tokens/s per user, mean
    TTFT and TPOT against the load, and where the devices state a board power output tokens per joule against the
    load, one line per configuration."""
    plt = _pyplot()
    joules = any(r.get("output_tokens_per_j") is not None for r in points)
    fig, axes = plt.subplots(1, 2 + joules, figsize=(11 + 5 * joules, 4.6), layout="constrained")
    left, right = axes[:2]
    closed = points[0]["concurrency"] is not None
    precisions = len({(r.get("weight_dtype"), r.get("kv_dtype")) for r in points}) > 1
    configurations = list(dict.fromkeys(_configuration(r, precisions) for r in points))
    for i, name in enumerate(configurations):
        mine = [r for r in points if _configuration(r, precisions) == name]
        x = [r["concurrency"] if closed else r["request_rate"] for r in mine]
        left.plot(
            [r["output_tokens_per_s_per_user"] for r in mine],
            [r["output_tokens_per_s_per_device"] for r in mine],
            marker="o",
            ms=4,
            color=f"C{i}",
            label=name,
            gid=f"throughput:{i}",
        )
        for r, load in zip(mine, x):
            left.annotate(
                str(load),
                (r["output_tokens_per_s_per_user"], r["output_tokens_per_s_per_device"]),
                xytext=(3, 3),
                textcoords="offset points",
                fontsize=6.5,
                color="0.4",
            )
        right.plot(x, [r["ttft_s"] * 1e3 for r in mine], marker="o", ms=4, color=f"C{i}", gid=f"ttft:{i}")
        right.plot(x, [r["tpot_s"] * 1e3 for r in mine], marker="s", ms=4, ls="--", color=f"C{i}", gid=f"tpot:{i}")
        if joules:
            per_j = [r.get("output_tokens_per_j") for r in mine]
            axes[2].plot(
                x,
                [float("nan") if j is None else j for j in per_j],
                marker="o",
                ms=4,
                color=f"C{i}",
                gid=f"tokens_per_j:{i}",
            )
    left.set(xlabel="output tokens/s per user", ylabel="output tokens/s per GPU", title="throughput against speed")
    right.set(
        xlabel="concurrency (clients)" if closed else "request rate (requests/s)",
        ylabel="ms",
        title="mean TTFT (solid) and TPOT (dashed) against load",
    )
    from matplotlib.ticker import FuncFormatter

    loads = [r["concurrency"] if closed else r["request_rate"] for r in points]
    if joules:
        axes[2].set(
            xlabel=right.get_xlabel(), ylabel="output tokens per joule", title="energy: tokens per joule against load"
        )
    for ax in axes[1:] if max(loads) / min(loads) >= 10 else ():
        ax.set_xscale("log", base=2 if closed else 10)
    if max(r["ttft_s"] for r in points) / min(r["tpot_s"] for r in points) >= 10:
        right.set_yscale("log")
    for ax in axes:
        ax.grid(True, which="major", alpha=0.3)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
            axis.set_minor_formatter(FuncFormatter(lambda v, _pos: f"{v:g}" if f"{v:g}"[0] in "25" else ""))
    left.legend(loc="best", fontsize=7)
    first = points[0]
    fig.suptitle(f"{first['model_name']}: requests of {first['input_len']:g} + {first['output_len']:g} tokens")
    return fig
