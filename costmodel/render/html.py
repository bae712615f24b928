"""A prediction as one self-contained HTML file (``--html FILE``): the command that printed it, its table, its
charts as inline SVG, its JSON (embedded, and as a download) and its rows as CSV (a download), nothing fetched from
anywhere: it opens offline.

The page shows what the command computed and computes nothing itself: the table is the command's own text, the
JSON its ``--json``, the charts drawn from that JSON.
"""

from __future__ import annotations

import base64
import html
import io
import json
import shlex

from costmodel.core.mpl import pyplot as _pyplot
from costmodel.render.text import duration

#: The page's look, inline (no stylesheet is fetched).
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin-top: 1.6em; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 12px; line-height: 1.35; }
code { background: #f0f0f0; padding: 0.15em 0.3em; }
.figure svg { max-width: 100%; height: auto; }
button, a.button { font-size: 0.9em; margin-right: 0.6em; }
"""

#: Copy the command to the clipboard (the only script: nothing is loaded).
SCRIPT = """
function copyCommand() {
  const text = document.getElementById('command').textContent;
  if (navigator.clipboard) { navigator.clipboard.writeText(text); }
}
"""


def _document(title: str, body: str) -> str:
    """The page around ``body``: its title, the inline style and the one script."""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{STYLE}</style>
<script>{SCRIPT}</script>
</head>
<body>
<h1>{html.escape(title)}</h1>
{body}
</body>
</html>
"""


def _command(argv: list[str], verb: str) -> str:
    """The command as the page gives it, with a button that copies it."""
    command = shlex.join(["costmodel", *argv])
    return (
        f'{verb} <code id="command">{html.escape(command)}</code>\n'
        '<button type="button" onclick="copyCommand()">copy the command</button>'
    )


def script_json(value, **dumps) -> str:
    """``value`` as JSON safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` of it is markup (the same
    JSON to a parser)."""
    text = json.dumps(value, allow_nan=False, **dumps)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _data(data, what: str) -> tuple[str, str]:
    """(a link that downloads ``data`` as JSON, the JSON embedded and shown)."""
    dumped = json.dumps(data, indent=1)
    download = base64.b64encode(dumped.encode("utf-8")).decode("ascii")
    embedded = dumped.replace("</", "<\\/")
    return (
        f'<a class="button" download="costmodel.json" href="data:application/json;base64,{download}">'
        f"download the {what}</a>",
        f'<script type="application/json" id="data">{embedded}</script>\n<pre>{html.escape(dumped)}</pre>',
    )


def _svg(fig) -> str:
    """A matplotlib figure as inline SVG (no XML declaration, no DOCTYPE)."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})  # ids from core.mpl's fixed salt: the same bytes
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _op_chart(title: str, rows: list[tuple[str, float, float | None, float | None]]):
    """Horizontal bars of op times (ms) with their measured ranges as whiskers (calibrated percentiles:
    costmodel.price.bands)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.2), layout="constrained")
    names = [r[0] for r in rows]
    times = [r[1] * 1e3 for r in rows]
    ax.barh(names, times, color="#4c72b0", gid="ops")
    ranged = [(i, r) for i, r in enumerate(rows) if r[2] is not None]
    if ranged:
        ax.errorbar(
            [rows[i][1] * 1e3 for i, _ in ranged],
            [i for i, _ in ranged],
            xerr=[[(r[1] - r[2]) * 1e3 for _, r in ranged], [(r[3] - r[1]) * 1e3 for _, r in ranged]],
            fmt="none",
            ecolor="black",
            elinewidth=1,
            capsize=3,
            gid="bands",
        )
    ax.invert_yaxis()
    ax.set(
        xlabel="time (ms); whiskers: the measured range of measured / predicted (costmodel.price.bands)", title=title
    )
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def _capacity_chart(data: dict):
    """Output tokens/s per device at the most clients under the targets, one bar per device and layout."""
    plt = _pyplot()
    points = [p for p in data["points"] if p.get("at")]
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(points) + 1.4), layout="constrained")
    ax.barh(
        [f"{p['device']}, {p['attention']} ({p['concurrency']} clients)" for p in points],
        [p["at"]["output_tokens_per_s_per_device"] for p in points],
        color="#4c72b0",
        gid="capacity",
    )
    ax.invert_yaxis()
    ax.set(xlabel="output tokens/s per device at the most clients under the targets", title=data.get("engine", ""))
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def _roofline_chart(item: dict):
    """A model step's ops on the device's roofline: each op at its arithmetic intensity (FLOPs per byte) and the
    rate its predicted time gives (FLOPs per second), under the datasheet's roof min(peak, bandwidth x intensity)."""
    import numpy as np

    plt = _pyplot()
    hw = item["hardware"]
    ops = [o for o in item["decode"]["ops"] if o["flops"] > 0 and o["bytes"] > 0 and o["time_s"] > 0]
    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    intensity = [o["flops"] / o["bytes"] for o in ops]
    lo, hi = min(intensity + [1.0]) / 2, max(intensity + [hw["ridge_point_flops_per_byte"]]) * 2
    x = np.geomspace(lo, hi, 200)
    ax.plot(
        x,
        np.minimum(hw["peak_flops_per_s"], hw["memory_bandwidth_bytes_per_s"] * x),
        color="black",
        label=f"roof: {hw['dtype']} peak, memory bandwidth",
        gid="roofline",
    )
    ax.scatter(
        intensity,
        [o["flops"] / o["time_s"] for o in ops],
        color="#4c72b0",
        zorder=3,
        label="each op at its predicted time",
        gid="roofline_ops",
    )
    for o, i in zip(ops, intensity):
        ax.annotate(o["name"], (i, o["flops"] / o["time_s"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="arithmetic intensity (FLOPs per byte)",
        ylabel="FLOPs per second",
        title=f"{hw['id']}: {item['model']['name']} decode step, per device",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _band(row: dict) -> tuple[float | None, float | None]:
    band = row.get("band")
    return (band["low_s"], band["high_s"]) if band else (None, None)


def _items(data) -> list[dict]:
    """The predictions a command's JSON holds: one, a list of them, or lists of lists."""
    items = data if isinstance(data, list) else [data]
    flat = [i for item in items for i in (item if isinstance(item, list) else [item])]
    return [item for item in flat if isinstance(item, dict)]


def charts(data) -> list[str]:
    """The charts a prediction's JSON gives: each attention variant's ops, a model step's decode ops, a request's or a
    served prediction's TTFT and TPOT (their ranges as whiskers), a capacity's throughput per layout, a plan's
    points and front."""
    out = []
    for item in _items(data):
        if "points" in item and "front" in item:
            from costmodel.render.plan_figure import draw_plan

            out.append(_svg(draw_plan(item)))
        elif "points" in item and any(p.get("at") for p in item["points"]):
            out.append(_svg(_capacity_chart(item)))
        elif "ops" in item and "workload" in item and "variant" in item["workload"]:
            w = item["workload"]
            rows = [(o["name"], o["time_s"], *_band(o)) for o in item["ops"]]
            out.append(
                _svg(_op_chart(f"{item['hardware']['id']}: {w['variant'].upper()} (g={w['g']}), per layer", rows))
            )
        elif "decode" in item and "ops" in item["decode"]:
            rows = [(f"{o['section']}: {o['name']}", o["time_s"], *_band(o)) for o in item["decode"]["ops"]]
            out.append(_svg(_op_chart(f"{item['hardware']['id']}: {item['model']['name']} decode step", rows)))
            out.append(_svg(_roofline_chart(item)))
        elif "ttft_s" in item and ("tpot_s" in item or "tpot_mean_s" in item):
            tpot = "tpot_s" if "tpot_s" in item else "tpot_mean_s"
            rows = [
                (name, item[value], *_band({"band": item.get(band)}))
                for value, band, name in (("ttft_s", "ttft_band", "TTFT (mean)"), (tpot, "tpot_band", "TPOT (mean)"))
            ]
            device = item.get("hardware", {}).get("id", "")
            out.append(_svg(_op_chart(f"{item.get('model_name', item.get('model', ''))} on {device}", rows)))
    return out


def _query(argv: list[str]) -> str:
    """A command's arguments as the web page's query (``command=...&option=value``, a bare flag as ``flag=``)."""
    from urllib.parse import urlencode

    pairs, rest = [("command", argv[0])], argv[1:]
    for i, arg in enumerate(rest):
        if arg.startswith("--"):
            value = rest[i + 1] if i + 1 < len(rest) and not rest[i + 1].startswith("--") else ""
            pairs.append((arg[2:], value))
    return urlencode(pairs)


def _linked(argv: list[str]) -> str:
    """A command, with the query of the web page's view of it (made a link there)."""
    return (
        f'<code class="point" data-query="{html.escape(_query(argv))}">'
        f"{html.escape(shlex.join(['costmodel', *argv]))}</code>"
    )


def _points(data) -> str:
    """A plan's front, point by point, each with the command that prices it alone (a link on the web page)."""
    rows = [p for item in _items(data) for p in item.get("front") or [] if p.get("command")]
    if not rows:
        return ""
    lines = "\n".join(
        f"<li>{html.escape(p['device'])}, {html.escape(p['layout'])}, {p['concurrency']} clients: TTFT "
        f"{duration(p['ttft_s'], 4)}, TPOT {duration(p['tpot_s'], 4)}, {p['output_tokens_per_s_per_device']:,.0f} "
        f"tokens/s per device: {_linked(p['command'])}"
        + (f"; its decode step: {_linked(p['step_command'])}" if p.get("step_command") else "")
        + "</li>"
        for p in rows
    )
    return f"<h2>The front, point by point</h2>\n<ul>\n{lines}\n</ul>"


def _csv_link(csv: str | None) -> str:
    """A link that downloads the command's rows as CSV (``--format csv``), where it has them."""
    if not csv:
        return ""
    download = base64.b64encode(csv.encode("utf-8")).decode("ascii")
    return (
        f'<a class="button" download="costmodel.csv" href="data:text/csv;base64,{download}">download the rows '
        "as CSV</a>"
    )


def _related(related) -> str:
    """Other commands' pages beside this one: (heading, what it shows, its arguments) each (a link on the web
    page)."""
    return "".join(
        f"<h2>{html.escape(heading)}</h2>\n<p>{html.escape(what)}: {_linked(argv)}</p>\n"
        for heading, what, argv in related
    )


def page(title: str, argv: list[str], table: str, data, csv: str | None = None, related=()) -> str:
    """The whole page: title, the command (and a button to copy it), downloads of its JSON and CSV rows, the charts,
    a plan's points with their own commands, the ``related`` commands' pages, the table, the JSON."""
    link, shown = _data(data, "JSON")
    link += _csv_link(csv)
    figures = "\n".join(f'<div class="figure">{svg}</div>' for svg in charts(data))
    live = _interactive(data)
    if live:  # the static charts stay, for print
        static = f"<details><summary>static images (SVG)</summary>\n{figures}\n</details>" if figures else ""
        figures = f"{live}\n{static}"
    return _document(
        title,
        f"""<p>{_command(argv, "The same numbers print with")}
{link}</p>
<h2>Charts</h2>
{figures or "<p>(no chart for this prediction)</p>"}
{_points(data)}
{_related(related)}
<h2>Table</h2>
<pre id="table">{html.escape(table)}</pre>
<h2>JSON</h2>
{shown}""",
    )


def _interactive(data) -> str:
    """The JSON's interactive charts (:mod:`costmodel.render.interactive`) with plotly.js inline, or "" where plotly
    is not installed or the JSON has none."""
    from costmodel.render.interactive import from_report, plotly_js

    script = plotly_js()
    figures = from_report(data) if script else []
    if not figures:
        return ""
    specs = script_json(figures)
    divs = "".join(f'<div class="chart" id="chart-{i}" style="height:420px"></div>' for i in range(len(figures)))
    draw = (
        "const FIGURES = JSON.parse(document.getElementById('figures').textContent);"
        "FIGURES.forEach((f, i) => Plotly.newPlot('chart-' + i, f.data, f.layout, {responsive: true, "
        "displaylogo: false}));"
    )
    return (
        f'{divs}\n<script>{script}</script>\n<script type="application/json" id="figures">{specs}</script>\n'
        f"<script>{draw}</script>"
    )


def figure_page(fig, data=None) -> str:
    """A figure command's page: its figure (inline SVG), the command that drew it (from the command line being
    run, where there is one) and what it plots (``data``, as JSON)."""
    import click

    title = (fig._suptitle.get_text() if fig._suptitle is not None else "") or next(
        (ax.get_title() for ax in fig.axes if ax.get_title()), "costmodel figure"
    )
    ctx = click.get_current_context(silent=True)
    body = []
    if ctx is not None:
        from costmodel.core.invocation import command_line

        body.append(f"<p>{_command([ctx.info_name, *command_line(ctx)], 'Drawn by')}</p>")
    body.append(f'<div class="figure">{_svg(fig)}</div>')
    if data is not None:
        link, shown = _data(data, "data")
        body += [f"<p>{link}</p>", "<h2>Data</h2>", shown]
    return _document(title.splitlines()[0], "\n".join(body))
