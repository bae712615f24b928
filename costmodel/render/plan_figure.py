"""A plan's figure: its points, front, range, memory limit and targets (:func:`draw_plan`), drawn from the plan or
its JSON; the ``--plot`` file and the ``--html`` page draw the same figure."""

from __future__ import annotations

from costmodel.core.mpl import pyplot as _pyplot


def draw_plan(plan):
    """A plan (a :class:`costmodel.deploy.planner.Plan` or its JSON) as tokens/s per device against tokens/s per user: per
    device kind every simulated point, each layout's points joined in order of load (a thin curve), the front as a
    line with the calibrated range of the measured means it is expected to fall in shaded
    (costmodel.price.bands.served), the points whose KV cache was full (the memory limit) crossed; with targets, the
    front's points that miss them hollow and the best under them starred, the targets in the title."""
    plt = _pyplot()
    data = plan.model_dump(mode="json") if hasattr(plan, "model_dump") else plan
    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    targets = [
        f"{name} <= {data[key] * 1e3:g} ms"
        for key, name in (("ttft_target_s", "TTFT"), ("tpot_target_s", "TPOT"))
        if data.get(key) is not None
    ]
    for i, device in enumerate(dict.fromkeys(p["device"] for p in data["points"])):
        _device(ax, data, device, f"C{i}", targets)
    ax.set(
        xlabel="output tokens/s per user",
        ylabel="output tokens/s per device",
        title=f"{data['model_name']} on {data['devices']} devices, {data['engine']}: requests of "
        f"{data['input_len']} + {data['output_len']} tokens" + (f"\n({', '.join(targets)})" if targets else ""),
    )
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=7)
    return fig


def rate_range(point: dict, output_len: int) -> tuple[float, float] | None:
    """The factors on a served point's rates at the ends of its measured means' ranges: its end-to-end time,
    TTFT + (output_len - 1) TPOT, at their high and low ends. In a closed loop both tokens/s per user and per device
    go as 1 / end-to-end time (Little's law: the clients are fixed). None without ranges."""
    ttft, tpot = point.get("ttft_band"), point.get("tpot_band")
    if not ttft or not tpot:
        return None
    steps = max(output_len - 1, 0)
    e2e = point["ttft_s"] + steps * point["tpot_s"]
    return e2e / (ttft["high_s"] + steps * tpot["high_s"]), e2e / (ttft["low_s"] + steps * tpot["low_s"])


def _xy(pts: list[dict]) -> tuple[list, list]:
    """Tokens/s per user and per device of ``pts``."""
    return [p["output_tokens_per_s_per_user"] for p in pts], [p["output_tokens_per_s_per_device"] for p in pts]


def _device(ax, data: dict, device: str, color: str, targets: list[str]) -> None:
    """One device kind's points, layouts' curves, front and its range, then its marks (:func:`_marks`)."""
    xy = _xy
    mine = lambda key: [p for p in data.get(key) or [] if p["device"] == device]  # noqa: E731
    ax.scatter(*xy(mine("points")), s=12, color=color, alpha=0.35, gid=f"points:{device}")
    for layout in dict.fromkeys(p["layout"] for p in mine("points")):  # each layout's curve over its loads
        curve = sorted((p for p in mine("points") if p["layout"] == layout), key=lambda p: p["concurrency"])
        if len(curve) > 1:
            ax.plot(*xy(curve), lw=0.6, color=color, alpha=0.35, gid=f"layout:{device}:{layout}")
    front = sorted(mine("front"), key=lambda p: p["output_tokens_per_s_per_user"])
    ax.plot(*xy(front), marker="o", ms=4, color=color, label=f"{device}: front", gid=f"front:{device}")
    ranged = [(p, rate_range(p, data["output_len"])) for p in front]
    ranged = [(p, r) for p, r in ranged if r is not None]
    if ranged:
        edge = [
            (p["output_tokens_per_s_per_user"] * f, p["output_tokens_per_s_per_device"] * f)
            for p, f in [(p, r[0]) for p, r in ranged] + [(p, r[1]) for p, r in ranged[::-1]]
        ]
        ax.fill(
            [e[0] for e in edge],
            [e[1] for e in edge],
            color=color,
            alpha=0.15,
            lw=0,
            label=f"{device}: range of measured means",
            gid=f"band:{device}",
        )
    _marks(ax, data, device, color, targets, front)


def _marks(ax, data: dict, device: str, color: str, targets: list[str], front: list[dict]) -> None:
    """A device kind's points whose KV cache was full, the front's labels, and with targets the points that miss
    them and the best under them."""
    xy = _xy
    mine = lambda key: [p for p in data.get(key) or [] if p["device"] == device]  # noqa: E731
    full = [p for p in mine("points") if p.get("kv_cache_full")]
    if full:
        ax.scatter(
            *xy(full),
            marker="x",
            s=36,
            color="black",
            zorder=5,
            label=f"{device}: KV cache full (the memory limit)",
            gid=f"kv_full:{device}",
        )
    for p in front:
        ax.annotate(
            f"{p['layout']}, c={p['concurrency']}",
            (p["output_tokens_per_s_per_user"], p["output_tokens_per_s_per_device"]),
            xytext=(3, 3),
            textcoords="offset points",
            fontsize=6,
            color="0.3",
        )
    if targets:
        missed = [p for p in front if not p.get("meets_targets")]
        if missed:
            ax.scatter(
                *xy(missed),
                s=60,
                facecolors="white",
                edgecolors="#c44e52",
                zorder=3,
                label=f"{device}: misses the targets",
                gid=f"misses:{device}",
            )
        for b in mine("best"):
            ax.scatter(
                *xy([b]),
                marker="*",
                s=220,
                color=color,
                edgecolors="black",
                zorder=4,
                label=f"{device}: best under the targets, {b['layout']}",
                gid=f"best:{device}",
            )
