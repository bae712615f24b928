"""Interactive charts, as plotly.js figures (``{"id", "data", "layout"}`` in plotly's JSON schema), drawn from the
reports' JSON. The web page and the ``--html`` file give them to plotly.js, which ships inside the ``plotly``
Python package (:func:`plotly_js`, the web extra): hover shows each point's numbers, drag zooms, the legend toggles
a series. The page overlays compared configurations by naming each trace after its configuration.
"""

from __future__ import annotations

import functools


@functools.cache
def plotly_js() -> str | None:
    """plotly.js, minified, from the installed ``plotly`` package (the ``web`` extra); None where it is missing."""
    from importlib import resources

    try:
        return resources.files("plotly").joinpath("package_data", "plotly.min.js").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        return None


def figure(ident: str, title: str, data: list[dict], x: str, y: str, **layout) -> dict:
    """A figure: ``data`` (plotly traces) under ``title`` with axis titles ``x`` and ``y``; ``layout`` adds to or
    replaces plotly layout keys (``xaxis_type="log"`` sets ``xaxis.type``)."""
    spec = {
        "title": {"text": title, "font": {"size": 14}},
        "xaxis": {"title": {"text": x}},
        "yaxis": {"title": {"text": y}},
        "hovermode": "closest",
        "margin": {"t": 48, "r": 24},
        "legend": {"orientation": "h", "y": -0.2},
    }
    for key, value in layout.items():
        axis, _, prop = key.partition("_")
        if prop and axis in spec:
            spec[axis][prop] = value
        else:
            spec[key] = value
    return {"id": ident, "data": data, "layout": spec}


def line(x, y, name: str, hover: str, text=None, **more) -> dict:
    """A scatter trace of lines and points whose hover reads ``hover`` (a plotly hovertemplate)."""
    trace = {"type": "scatter", "mode": "lines+markers", "x": list(x), "y": list(y), "name": name}
    trace["hovertemplate"] = hover + "<extra>%{fullData.name}</extra>"
    if text is not None:
        trace["text"] = list(text)
    return trace | more


def ops_chart(phase: str, ops: list[dict]) -> dict:
    """A step's time by op, stacked by section (each op's time over all its layers)."""
    sections = list(dict.fromkeys(o["section"] for o in ops))
    data = []
    for section in sections:
        mine = [o for o in ops if o["section"] == section]
        data.append(
            {
                "type": "bar",
                "name": section,
                "x": [o["name"] for o in mine],
                "y": [o["time_s"] * 1e6 for o in mine],
                "customdata": [[o["bound"], o["flops"], o["bytes"]] for o in mine],
                "hovertemplate": "%{x}: %{y:.4g} µs (%{customdata[0]}-bound)<br>%{customdata[1]:.3s} FLOP, "
                "%{customdata[2]:.3s} B<extra>" + section + "</extra>",
            }
        )
    return figure(f"ops-{phase}", f"{phase} step time by op", data, "op", "time (µs)", barmode="stack")


def roofline_chart(device: dict, ops: dict[str, list[dict]]) -> dict:
    """The device's roofline (``device``: a report's ``hardware``, its peak for the report's dtype and its memory
    bandwidth) with each op placed at its arithmetic intensity (FLOP per byte moved) and the FLOP/s it reaches as
    priced."""
    peak, bandwidth = device["peak_flops_per_s"], device["memory_bandwidth_bytes_per_s"]
    xs = [10 ** (k / 4) for k in range(-8, 21)]
    roof = [min(peak, bandwidth * x) / 1e12 for x in xs]
    data = []
    for phase, mine in ops.items():
        placed = [o for o in mine if o["flops"] > 0 and o["bytes"] > 0 and o["time_s"] > 0]
        data.append(
            line(
                [o["flops"] / o["bytes"] for o in placed],
                [o["flops"] / o["time_s"] / 1e12 for o in placed],
                phase,
                "%{text}<br>%{x:.3g} FLOP/B, %{y:.4g} TFLOP/s",
                text=[f"{o['section']}: {o['name']}" for o in placed],
                mode="markers",
            )
        )
    # the roof last, so each phase or attention keeps the colour it has in the other charts
    data.append(line(xs, roof, f"{device['id']} roof ({device['dtype']})", "%{y:.4g} TFLOP/s", mode="lines"))
    data[-1]["line"] = {"color": "#444"}
    title = f"roofline of {device['name']}"
    return figure("roofline", title, data, "FLOP per byte", "TFLOP/s", xaxis_type="log", yaxis_type="log")


def timeline_chart(timeline: dict) -> dict:
    """A served run iteration by iteration: running sequences, prefilled tokens and KV pages taken, over time (each
    point the most over the iterations it spans)."""
    t = timeline["t_s"]
    rows = (
        ("batch", "running sequences", "y", 1),
        ("prefill_tokens", "prefill tokens", "y2", 1),
        ("kv_use", "KV use (%)", "y3", 100),
    )
    data = [
        line(t, [v * scale for v in timeline[key]], name, "%{x:.3f} s: %{y:.4g}", yaxis=axis, mode="lines")
        for key, name, axis, scale in rows
    ]
    layout = {
        "xaxis": {"title": {"text": "time (s)"}, "anchor": "y3"},
        "yaxis": {"title": {"text": "sequences"}, "domain": [0.7, 1]},
        "yaxis2": {"title": {"text": "prefill tokens"}, "domain": [0.36, 0.64]},
        "yaxis3": {"title": {"text": "KV use (%)"}, "domain": [0, 0.3]},
    }
    title = "the run iteration by iteration (each point the most over its span)"
    return figure("timeline", title, data, "time (s)", "sequences", **layout)


def curve_charts(points: list[dict], label: str) -> list[dict]:
    """A load curve: output tokens/s per GPU against tokens/s per user, and TTFT and TPOT against the load."""
    loads = [p["concurrency"] or p["request_rate"] for p in points]
    axis = "clients" if points[0]["concurrency"] else "requests/s"
    hover = f"{axis} %{{text}}<br>%{{x:.4g}} tok/s/user, %{{y:.4g}} tok/s/GPU"
    throughput = line(
        [p["output_tokens_per_s_per_user"] for p in points],
        [p["output_tokens_per_s_per_gpu"] for p in points],
        label,
        hover,
        text=loads,
    )
    latency = [
        line(loads, [p[key] * 1e3 for p in points], f"{label} {name}", f"{axis} %{{x}}: %{{y:.4g}} ms")
        for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"))
    ]
    out = [
        figure(
            "throughput",
            "throughput per GPU against speed per user",
            [throughput],
            "tokens/s per user",
            "tokens/s per GPU",
        ),
        figure("latency", "TTFT and TPOT against load", latency, axis, "ms", xaxis_type="log", yaxis_type="log"),
    ]
    if any(p.get("output_tokens_per_j") is not None for p in points):
        per_j = line(loads, [p.get("output_tokens_per_j") for p in points], label, f"{axis} %{{x}}: %{{y:.4g}} tok/J")
        out.append(
            figure("energy", "output tokens per joule against load", [per_j], axis, "tokens/J", xaxis_type="log")
        )
    return out


def plan_chart(plan: dict) -> dict:
    """A plan's points, each device's front with its measured range shaded, and the best under the targets."""
    from costmodel.render.plan_figure import rate_range

    data = []
    hover = "%{text}<br>%{x:.4g} tok/s/user, %{y:.4g} tok/s/GPU"
    for i, device in enumerate(dict.fromkeys(p["device"] for p in plan["points"])):
        color = PALETTE[i % len(PALETTE)]
        mine = [p for p in plan["points"] if p["device"] == device]
        front = sorted((p for p in plan["front"] if p["device"] == device), key=_user)
        data.append(
            line(
                map(_user, mine),
                map(_gpu, mine),
                f"{device} points",
                hover,
                _labels(mine),
                mode="markers",
                marker={"size": 5, "opacity": 0.4, "color": color},
            )
        )
        ranges = [rate_range(p, plan["output_len"]) or (1.0, 1.0) for p in front]
        for end, fill in ((0, None), (1, "tonexty")):
            edge = [(_user(p) * r[end], _gpu(p) * r[end]) for p, r in zip(front, ranges)]
            data.append(
                line(
                    [e[0] for e in edge],
                    [e[1] for e in edge],
                    f"{device} measured range",
                    "%{x:.4g}, %{y:.4g}",
                    mode="lines",
                    line={"width": 0, "color": color},
                    fillcolor=_faint(color),
                    fill=fill,
                    showlegend=end == 1,
                    legendgroup=f"{device} range",
                    hoverinfo="skip",
                )
            )
        front_line = line(map(_user, front), map(_gpu, front), f"{device} front", hover, _labels(front))
        data.append(front_line | {"line": {"color": color}, "marker": {"color": color}})
    if plan.get("best"):
        best = plan["best"]
        data.append(
            line(
                map(_user, best),
                map(_gpu, best),
                "best under the targets",
                hover,
                _labels(best),
                mode="markers",
                marker={"symbol": "star", "size": 16, "color": "#222"},
            )
        )
    title = f"{plan['model_name']} on {plan['devices']} GPUs: every layout under load"
    return figure("plan", title, data, "output tokens/s per user", "output tokens/s per GPU")


#: plotly's own first colours, one per device kind of a plan (its points, range and front alike).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _faint(color: str) -> str:
    """``color`` (#rrggbb) at a fifth of its opacity, for a shaded range."""
    r, g, b = (int(color[k : k + 2], 16) for k in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, 0.2)"


def _user(p: dict) -> float:
    return p["output_tokens_per_s_per_user"]


def _gpu(p: dict) -> float:
    return p["output_tokens_per_s_per_device"]


def _labels(points: list[dict]) -> list[str]:
    return [f"{p['device']} {p['layout']}, {p['concurrency']} clients" for p in points]


def from_report(data) -> list[dict]:
    """The interactive charts a command's JSON gives: a plan's front, a model step's roofline and ops, served runs'
    load curves (one series per device, tensor-parallel size and engine)."""
    items = data if isinstance(data, list) else [data]
    items = [i for item in items for i in (item if isinstance(item, list) else [item]) if isinstance(i, dict)]
    items = [p for item in items for p in (item["points"] if _curve(item) else [item])]
    out = []
    for item in items:
        if "points" in item and "front" in item:
            out.append(plan_chart(item))
        elif "decode" in item and "ops" in item["decode"]:
            ops = {phase: item[phase]["ops"] for phase in ("decode", "prefill") if phase in item}
            out += [roofline_chart(item["hardware"], ops), *(ops_chart(ph, o) for ph, o in ops.items())]
    served = [i for i in items if "output_tokens_per_s_per_gpu" in i and "engine" in i]
    series: dict[str, list[dict]] = {}
    for p in served:
        series.setdefault(f"{p['hardware']['id']} tp{p['tp']} {p['engine']['name']}", []).append(p)
    curves = [curve_charts(points, label) for label, points in series.items()]
    for i, first in enumerate(curves[0] if curves else []):
        out.append(first | {"data": [t for c in curves for t in c[i]["data"]]})
    return out


def _curve(item: dict) -> bool:
    """Whether ``item`` is a load curve's JSON (its served points under ``points``)."""
    return "points" in item and "front" not in item and all("ttft_s" in p for p in item["points"])
