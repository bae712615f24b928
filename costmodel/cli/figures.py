"""The ``costmodel`` commands that draw figures, measure a device, and reproduce the papers."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import click

from costmodel.cli.click_types import OnceCommand
from costmodel.cli.html import check_html_name
from costmodel.cli.options import (
    FilePath,
    check_writable,
    choices,
    dim_options,
    dtype_option,
    echo_lines,
    given,
    gpus_option,
    groups_option,
    max_points_option,
    title_dims,
    variant_option,
    workload_options,
)
from costmodel.cli.serving import model_options
from costmodel.core.errors import CostModelError
from costmodel.core.files import wrote
from costmodel.core.vocab import DEFAULTS, EXECUTIONS, MECHANISMS, VARIANTS


def validation(module: str = ""):
    """``costmodel.validation`` (or one of its modules), which the top-level ``validation/`` folder becomes when the
    package is installed; from a source tree that is only on the path it is missing, which gets one line saying
    so, not a traceback."""
    import importlib

    name = "costmodel.validation" + (f".{module}" if module else "")
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is None or not err.name.startswith("costmodel.validation"):
            raise
        raise CostModelError(
            f"{name} is not importable here: the repository's validation/ folder becomes "
            "costmodel.validation when the package is installed (pip install -e . from the "
            "repository root), not when its source tree is only on the path"
        ) from None


@click.command(cls=OnceCommand)
@gpus_option
@groups_option
@dim_options
@dtype_option
@click.option(
    "--execution",
    type=choices(EXECUTIONS),
    default=DEFAULTS["execution"],
    show_default=True,
    help="every op its own kernel, or flash-style fused attention",
)
@click.option(
    "--out",
    required=True,
    type=FilePath(),
    help="output file: .png, .svg, .pdf, or .html (one page that opens offline)",
)
def roofline(gpus, groups, dtype, execution, out, **dims) -> None:
    """Plot every op of MHA, GQA and MQA, decode step and prefill, under each device's roofline.

    Markers sit at the op's arithmetic intensity and its attainable throughput on the first device.

    Example: costmodel roofline --gpu a100 --gpu h100 --out roofline.png
    """
    from costmodel.attention.figures import roofline_points
    from costmodel.attention.workload import workloads
    from costmodel.hardware.catalog import load_profile
    from costmodel.render.plots import check_output, draw_roofline, save

    check_output(out)
    hws = [load_profile(g) for g in gpus]
    sizes = given(dims)
    decode = workloads(None, groups, "incremental", dtype=dtype, execution=execution, **sizes)
    prefill = workloads(
        None,
        groups,
        "batched",
        dtype=dtype,
        execution=execution,
        **given({**sizes, "context": sizes.get("context", sizes.get("seq"))}),
    )
    w, p = decode[0], prefill[0]
    title = (
        f"Roofline on {', '.join(h.name for h in hws)}\n"
        f"decode step b={w.b}, m={w.m}; prefill b={p.b}, n={p.n}, m={p.m}; {title_dims(w)}"
    )
    points = roofline_points(hws[0], decode + prefill)
    import dataclasses

    save(draw_roofline(hws, decode + prefill, title, points), out, data=[dataclasses.asdict(p) for p in points])
    echo_lines(wrote(out))


@click.command("sweep", cls=OnceCommand)
@gpus_option
@click.option(
    "--x",
    "x_name",
    type=choices(["context", "batch", "groups", "seq", "input-len", "output-len"]),
    required=True,
    help="the dimension on the x axis (with --model: batch, context, input-len, output-len)",
)
@click.option(
    "--range",
    "range_text",
    required=True,
    metavar="RANGE",
    help="START:STOP:xFACTOR, START:STOP:STEP or a comma list, e.g. 128:32768:x2",
)
@variant_option(VARIANTS, "one variant (default: all three; --x groups needs gqa)")
@groups_option
@workload_options
@click.option("--out", type=FilePath(), help="output file: .png, .svg, .pdf, or .html (one page that opens offline)")
@click.option(
    "--html",
    "html_path",
    type=FilePath(),
    help="also (or instead of --out) write the figure as one self-contained HTML page: the figure, the "
    "command and the points (opens offline)",
)
@click.option("--csv", "csv_path", type=FilePath(), help="also write the points as CSV")
@max_points_option
@model_options
@click.option("--variants", is_flag=True, help="with --model: also its MHA, GQA, MQA and MLA versions, one curve each")
def sweep_plot(**options) -> None:
    """Plot predicted latency (and tokens/s when decoding) against one dimension, per variant; with --model,
    a whole model's throughput against latency, one point per swept value and one curve per layout or device.

    The last point where weights + KV cache fit in device memory is marked on each curve.

    Example: costmodel sweep --gpu h100 --x context --range 128:32768:x2 --out sweep.png
    """
    o = SimpleNamespace(**{k: options.pop(k) for k in _SWEEP_PLOT_PARAMS})
    dims = options
    from costmodel.attention.figures import memory_limits
    from costmodel.attention.sweeps import Envelope, plan_sweep
    from costmodel.attention.workload import workloads
    from costmodel.hardware.catalog import load_profile
    from costmodel.render.plots import draw_sweep, save

    outs = figure_files(o.out, o.html_path)
    o.x_name = o.x_name.lower().replace("-", "_")
    if o.model_name:
        _model_sweep(o, dims, outs)
        return
    if o.x_name in ("input_len", "output_len"):
        raise CostModelError(f"--x {o.x_name.replace('_', '-')} needs --model")
    if o.csv_path is not None:
        check_writable(o.csv_path)
    hws = [load_profile(g) for g in o.gpus]
    hw = hws[0]
    if o.x_name == "groups" and not o.variant:
        o.variant = "gqa"
    chosen = workloads(
        o.variant,
        o.groups,
        o.mode,
        dtype=o.dtype,
        layers=o.layers,
        execution=o.execution or DEFAULTS["execution"],
        cache_append=o.cache_append,
        **given(dims),
    )
    from costmodel.cli.attention import stream_sweep
    from costmodel.price.origin import time_model

    plans = [plan_sweep(chosen, d, o.x_name, o.range_text, o.overlap, o.max_points, o.timing, o.without) for d in hws]
    # evaluated a chunk at a time, each chunk written to the CSV and reduced to what the figure needs, so that memory
    # does not grow with the points
    envelopes = [Envelope(plan.values, plan.parameter) for plan in plans]
    stream_sweep(hws, plans, "table", o.csv_path, each=lambda i, chunk: envelopes[i].add(chunk))
    runs = [
        (
            device,
            plan,
            envelope.records(),
            memory_limits(
                device, chosen, plan.dim, plan.values, plan.linked, o.overlap, time_model(device, o.timing, o.without)
            ),
        )
        for device, plan, envelope in zip(hws, plans, envelopes)
    ]
    _, plan, shown, limits = runs[0]
    title = _sweep_title(hws, chosen[0], plan.dim)
    records = shown if len(runs) == 1 else [{"device": d.id, **r} for d, _, recs, _ in runs for r in recs]
    more = [(d, recs, lim) for d, _, recs, lim in runs[1:]]
    fig = draw_sweep(hw, chosen, o.x_name, plan.dim, plan.values, shown, limits, title, more)
    for path in outs:  # one figure, saved to each file (an HTML page with the points the figure draws)
        save(fig, path, data=records)
    echo_lines(wrote(*outs, o.csv_path))


def _model_sweep(o, dims: dict, outs: list) -> None:
    """sweep --model: a whole model's throughput against latency over the swept value."""
    from costmodel.cli.serving import conventions, load_layouts, plot_model_sweep
    from costmodel.hardware.catalog import load_profile

    if o.x_name not in ("batch", "context", "input_len", "output_len"):
        raise CostModelError(f"--x {o.x_name} does not apply with --model; use batch, context, input-len or output-len")
    layouts = load_layouts(o.model_name, o.variant, o.groups, o.kv_heads, o.variants)
    plot_model_sweep(
        [load_profile(g) for g in o.gpus],
        layouts,
        f"{o.x_name}={o.range_text}",
        outs,
        o.csv_path,
        o.max_points,
        dims["batch"],
        dims["context"],
        o.input_len,
        o.output_len,
        conventions(o.dtype, o.execution, o.tp, o.overlap, o.timing, o.without, o.weight_dtype, o.kv_dtype, o.mla_form),
    )


def _sweep_title(hws: list, w, dim: str) -> str:
    """An attention sweep's title: the devices, the mode, the fixed dimensions and the layers."""
    fixed = ", ".join(
        f"{k}={getattr(w, k)}"
        for k in ("b", "n", "m")
        if k != dim and not (k == "n" and w.mode == "incremental") and not (k == "m" and w.mode == "generate")
    )
    what = {"incremental": "decode step", "generate": "generate", "batched": "prefill"}[w.mode]
    return (
        f"{' vs '.join(d.name for d in hws)}: attention only, {what}, {fixed}, {title_dims(w)}, "
        f"{w.layers} layer{'s' * (w.layers > 1)}"
    )


#: sweep_plot's own parameters; the others are the workload's dimensions
_SWEEP_PLOT_PARAMS = (
    "gpus",
    "x_name",
    "range_text",
    "variant",
    "groups",
    "mode",
    "dtype",
    "layers",
    "execution",
    "overlap",
    "cache_append",
    "timing",
    "without",
    "out",
    "html_path",
    "csv_path",
    "max_points",
    "model_name",
    "tp",
    "kv_heads",
    "weight_dtype",
    "kv_dtype",
    "mla_form",
    "input_len",
    "output_len",
    "variants",
)


def figure_files(out: str | None, html_path: str | None) -> list[str]:
    """The files a figure command writes: ``--out`` (by its suffix) and ``--html`` (a page), checked before any
    work; at least one."""
    from costmodel.render.plots import check_output

    if out is None and html_path is None:
        raise CostModelError("give --out FILE (.png, .svg, .pdf or .html) or --html FILE")
    if html_path is not None:
        check_html_name(html_path)
    outs = [p for p in (out, html_path) if p is not None]
    for path in outs:
        check_output(path)
    return outs


@click.command(cls=OnceCommand)
@click.option("--device", type=choices(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--out", required=True, type=FilePath(), help="profile YAML to write")
@click.option("--quick", is_flag=True, help="smaller sizes and shorter timing (seconds, not tens of seconds)")
@click.option("--threads", type=click.IntRange(1, 4096), help="CPU threads torch uses (default: torch's choice)")
def calibrate(device, out, quick, threads) -> None:
    """Measure this device and write a hardware profile marked as measured.

    Measures matmul FLOP/s per dtype, read and copy bandwidth, per-op overhead, and the bandwidth,
    FLOP rate and overhead of each op class (projection, attention, elementwise, copy, fused attention).
    On a CPU it also times each class over a curve of sizes and fits the prediction mechanisms to it,
    and warns when the machine is too busy for the timings to mean anything.

    Example: costmodel calibrate --device cpu --out my_cpu.yaml
    """
    click.echo(validation().calibrate_command(device, out, quick, threads))


@click.command(cls=OnceCommand)
@click.option("--device", type=choices(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--gpu", help="datasheet profile to compare (default: the profile whose device_names match the device)")
@click.option("--profile", "profile_path", type=FilePath(), help="calibrated profile (default: calibrate now)")
@click.option("--quick", is_flag=True, help="a small grid, for a smoke test (CI)")
@click.option("--json", "json_path", type=FilePath(), help="write the full report as JSON")
@click.option("--plot", "plot_path", type=FilePath(), help="predicted-vs-measured figure")
@click.option(
    "--save-profile",
    "save_path",
    type=FilePath(),
    help="write the profile calibrated in this run (without --profile) as YAML",
)
@click.option(
    "--published",
    "published",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[DIR]",
    help="compare with published GPU timings in DIR (default: the subset shipped in the package) "
    "instead of running kernels here",
)
@click.option(
    "--serving",
    "serving",
    type=FilePath(),
    metavar="FILE",
    help="predict every deployment of a file in the layout of aiconfigurator's silicon_sample.csv "
    "(served models at a concurrency: TTFT and TPOT) and report the errors",
)
@click.option(
    "--without",
    "without",
    multiple=True,
    type=choices((*MECHANISMS, "all")),
    help="with --published: switch a fitted mechanism off to see its share (repeatable)",
)
@click.option("--threads", type=click.IntRange(1, 4096), help="CPU threads torch uses (default: torch's choice)")
@click.option(
    "--timing",
    type=choices(("eager", "graph")),
    default="eager",
    show_default=True,
    help="with --device cuda: each op an eager call (the host's dispatch included) or a CUDA-graph replay "
    "(GPU time alone, predicted as serving engines run; calibrates nothing)",
)
@click.option(
    "--format",
    "fmt",
    type=choices(("table", "csv", "markdown")),
    default="table",
    show_default=True,
    help="with --published: the summary as an aligned table, CSV or a markdown table",
)
def validate(
    device, gpu, profile_path, quick, json_path, plot_path, save_path, published, serving, without, threads, timing, fmt
) -> None:
    """Measure every op and whole step as torch kernels and report the prediction error; or, with
    --published, hold the predictions against published GPU kernel timings (no torch needed).

    Each case of a grid (variants x modes x batch x context x dtype x execution) is predicted with a
    datasheet profile and a calibrated one; torch's FlopCounterMode cross-checks the FLOPs.

    Example: costmodel validate --device cpu --quick --json report.json

    Example: costmodel validate --device cuda --timing graph --json graph.json

    Example: costmodel validate --published ../shared/measurements --json published.json

    Example: costmodel validate --serving ../shared/measurements/serving/silicon_sample_h100_sxm.csv
    """
    if serving is not None:
        serving_command = validation("serving").serving_command

        if (
            published is not None
            or profile_path
            or quick
            or gpu
            or save_path
            or without
            or threads
            or timing.lower() != "eager"
        ):
            raise CostModelError("--serving takes --json, --plot and --format only (each row names its system)")
        for line in serving_command(serving, json_path, plot_path, fmt.lower()):
            click.echo(line)
        return
    if published is not None:
        published_command = validation().published_command

        if profile_path or quick or gpu or save_path or timing.lower() != "eager":
            raise CostModelError(
                "--profile, --quick, --gpu, --save-profile and --timing do not apply with --published "
                "(each table names its GPU and its timing)"
            )
        for line in published_command(published or None, json_path, plot_path, without, fmt.lower()):
            click.echo(line)
        return
    if without:
        raise CostModelError("--without applies with --published")
    if fmt.lower() != "table":
        raise CostModelError("--format applies with --published (a kernel run writes its report with --json)")
    if save_path and profile_path:
        raise CostModelError("--save-profile writes the profile this run calibrates; with --profile it calibrates none")
    validate_command = validation().validate_command

    def progress(cases):
        with click.progressbar(length=len(cases), label="cases", file=sys.stderr) as bar:
            for case in cases:
                yield case
                bar.update(1)

    for line in validate_command(
        device,
        gpu,
        profile_path,
        quick,
        json_path,
        plot_path,
        progress,
        lambda text: click.echo(text, err=True),
        threads,
        save_path,
        timing.lower(),
    ):
        click.echo(line)
