"""The ``costmodel`` command line. Commands only parse options and format report objects."""

from __future__ import annotations

import json
import math
import sys

import click

from costmodel.errors import CostModelError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _Group(click.Group):
    """Turns a :class:`CostModelError` into one ``Error:`` line and exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CostModelError as err:
            raise click.ClickException(str(err)) from None


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(package_name="costmodel")
def main() -> None:
    """Exact FLOP and memory costs of MHA, GQA and MQA attention, and what they cost on an accelerator."""


Positive = click.IntRange(min=1)

#: option name -> (dimension symbol, help)
DIM_OPTIONS = {
    "batch": ("b", "batch size b"),
    "seq": ("n", "query positions n (tokens generated in generate mode)"),
    "context": ("m", "memory positions m (cached positions before the step in incremental mode)"),
    "d_model": ("d", "model dimension d"),
    "heads": ("h", "query heads h"),
    "head_dim": ("k", "key dimension per head k (default d/h)"),
    "value_dim": ("v", "value dimension per head v (default d/h)"),
}


def variant_options(func):
    """--variant and --groups, shared by the commands that pick an attention variant."""
    func = click.option("--groups", "-g", type=Positive, help="key/value heads g (gqa only)")(func)
    return click.option(
        "--variant",
        type=click.Choice(["mha", "mqa", "gqa"], case_sensitive=False),
        default="mha",
        show_default=True,
        help="attention variant: multi-head, multi-query or grouped-query",
    )(func)


def dim_options(func):
    """One option per numeric dimension (--batch, --seq, ...); --context may be 0 (an empty cache)."""
    for name, (_, text) in reversed(DIM_OPTIONS.items()):
        kind = click.IntRange(min=0) if name == "context" else Positive
        func = click.option(f"--{name.replace('_', '-')}", name, type=kind, help=text)(func)
    return func


DTYPES = click.Choice(["fp32", "tf32", "bf16", "fp16", "fp8", "int8"], case_sensitive=False)


def dims_from(options: dict) -> dict[str, int]:
    return {DIM_OPTIONS[k][0]: v for k, v in options.items() if k in DIM_OPTIONS and v is not None}


@main.command()
@variant_options
@click.option(
    "--mode",
    type=click.Choice(["batched", "incremental", "generate", "single-query", "dot-product"], case_sensitive=False),
    default="incremental",
    show_default=True,
    help="batched attention, one decode step, n decode steps, or the paper's one-query forms",
)
@dim_options
@click.option("--dtype", type=DTYPES, default="bf16", show_default=True, help="storage dtype (sets bytes per element)")
@click.option("--cache-append", type=click.Choice(["inplace", "concat"], case_sensitive=False), default="inplace",
              show_default=True, help="KV-cache append: write the new position, or copy the cache (tf.concat)")
@click.option("--asymptotic", is_flag=True, help="add the Θ forms under the paper's assumptions")
@click.option("--latex", "as_latex", is_flag=True, help="print a LaTeX tabular")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def derive(variant, groups, mode, dtype, cache_append, asymptotic, as_latex, as_json, **dims) -> None:
    """Derive exact per-op FLOP and memory counts of an attention program.

    Counts come from the einsum shapes of the paper's programs (Shazeer 2019), one grouped-query program
    for all variants. Dimensions not given stay symbolic.

    Example: costmodel derive --variant mqa --mode generate --asymptotic
    """
    from costmodel import format as fmt
    from costmodel.counts import derive as derive_counts

    report = derive_counts(
        variant.lower(), mode.lower(), groups=groups, dtype=dtype.lower(), dims=dims_from(dims),
        cache_append=cache_append.lower(),
    )
    asym = None
    if asymptotic:
        from costmodel.asymptotic import analyze

        if report.substitutions:
            raise CostModelError(
                "--asymptotic needs symbolic dimensions; drop the numeric ones "
                f"({', '.join(report.substitutions)})"
            )
        if report.mode in ("single-query", "dot-product"):
            raise CostModelError(
                f"--asymptotic applies to modes batched, incremental and generate, not {report.mode}"
            )
        asym = analyze(report)
    if as_json:
        out = report.to_dict()
        if asym is not None:
            out["asymptotic_ratio"] = str(asym.ratio)
            out["asymptotic"] = asym.to_dict()
            out["assumptions"] += list(asym.assumptions)
        click.echo(json.dumps(out, indent=2))
    elif as_latex:
        click.echo(fmt.latex(report, asym))
    else:
        click.echo(fmt.table(report, asym))


@main.group()
def hardware() -> None:
    """List and show the hardware profiles (one YAML file per device, every number sourced)."""


@hardware.command("list")
@click.option("--json", "as_json", is_flag=True, help="print a JSON array")
def hardware_list(as_json) -> None:
    """List the shipped hardware profiles.

    Example: costmodel hardware list
    """
    from costmodel.format import hardware_table
    from costmodel.hardware import load_all

    profiles = load_all()
    if as_json:
        click.echo(json.dumps([p.model_dump(mode="json") for p in profiles], indent=2))
    else:
        click.echo(hardware_table(profiles))


@hardware.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def hardware_show(name, as_json) -> None:
    """Show one profile by id, alias (case-insensitive) or YAML path, with the source of every number.

    Example: costmodel hardware show h100
    """
    from costmodel.format import hardware_detail
    from costmodel.hardware import load_profile

    profile = load_profile(name)
    click.echo(json.dumps(profile.model_dump(mode="json"), indent=2) if as_json else hardware_detail(profile))


def workload_options(func):
    """The workload flags shared by predict and the plotting commands."""
    for option in reversed([
        click.option("--mode", type=click.Choice(["batched", "incremental", "generate"], case_sensitive=False),
                     default="incremental", show_default=True,
                     help="batched attention (prefill), one decode step, or n decode steps"),
        dim_options,
        click.option("--dtype", type=DTYPES, default="bf16", show_default=True, help="storage and math dtype"),
        click.option("--layers", type=Positive, default=1, show_default=True, help="attention layers"),
        click.option("--execution", type=click.Choice(["unfused", "fused"], case_sensitive=False),
                     help="every op its own kernel, or flash-style fused attention "
                          "[default: unfused; fused with --model]"),
        click.option("--overlap", type=click.Choice(["max", "sum"], case_sensitive=False), default="max",
                     show_default=True, help="op time = max(compute, memory) or their sum"),
        click.option("--cache-append", type=click.Choice(["inplace", "concat"], case_sensitive=False),
                     default="inplace", show_default=True, help="KV-cache append in place, or a full copy"),
    ]):
        func = option(func)
    return func


def make_workloads(variant, groups, mode, dtype, layers, execution, cache_append, dims) -> list:
    """One workload per variant asked for (all three when --variant is not given)."""
    from costmodel.roofline import Workload

    variants = [variant.lower()] if variant else ["mha", "gqa", "mqa"]
    if groups is not None and variant is None:
        variants = ["mha", "gqa", "mqa"]
    if groups is not None and variant and variant.lower() != "gqa":
        from costmodel.program import kv_heads

        kv_heads(variant.lower(), groups)  # the error that names the valid use
    sizes = {k: v for k, v in dims.items() if v is not None}
    return [
        Workload.create(v, mode.lower(), groups=groups if v == "gqa" else None, dtype=dtype.lower(), layers=layers,
                        execution=execution.lower(), cache_append=cache_append.lower(), **sizes)
        for v in variants
    ]


def parse_range(text: str) -> list[int]:
    """``128:32768:x2`` (geometric), ``1:64:+8`` or ``1:64:8`` (linear), or ``1,2,4``."""
    bad = CostModelError(
        f"invalid range {text!r}; expected START:STOP:xFACTOR (e.g. 128:32768:x2), START:STOP:STEP or a comma list"
    )
    try:
        if "," in text or ":" not in text:
            values = [int(x) for x in text.split(",")]
        else:
            start, stop, step = text.split(":")
            start, stop = int(start), int(stop)
            values = []
            if step.startswith("x"):
                factor = float(step[1:])
                if factor <= 1:
                    raise bad
                x = float(start)
                while x <= stop:
                    values.append(int(round(x)))
                    x *= factor
            else:
                values = list(range(start, stop + 1, int(step.lstrip("+"))))
    except ValueError:
        raise bad from None
    if not values or min(values) < 0:
        raise bad
    return values


@main.command()
@click.option("--gpu", required=True, help="hardware id or alias (a100, h100, tpu-v5e, ...) or a YAML profile path")
@click.option("--variant", type=click.Choice(["mha", "mqa", "gqa"], case_sensitive=False),
              help="one variant (default: MHA, GQA and MQA side by side)")
@click.option("--groups", "-g", type=Positive, help="key/value heads of GQA (default gcd(heads, 8))")
@workload_options
@click.option("--sweep", "sweep_spec", metavar="DIM=RANGE",
              help="sweep one dimension (batch, seq, context, d-model, heads, groups, head-dim, value-dim), "
                   "e.g. context=128:32768:x2")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="with --sweep: also write a CSV file")
@click.option("--model", "model_name", help="a whole model: preset id or alias (llama-3-8b, ...) or a config.json")
@click.option("--model-config", type=click.Path(dir_okay=False), help="a Hugging Face config.json to read the model from")
@click.option("--tp", type=Positive, default=1, show_default=True, help="with --model: tensor-parallel devices")
@click.option("--source", type=Positive, help="with an encoder-decoder --model: source (encoder) length")
@click.option("--json", "as_json", is_flag=True, help="print JSON (an array when variants are compared)")
def predict(gpu, variant, groups, mode, dtype, layers, execution, overlap, cache_append, sweep_spec, csv_path,
            model_name, model_config, tp, source, as_json, **dims) -> None:
    """Predict per-op and total latency of attention, or of a whole model, on a device with a roofline.

    With no workload flags: one decode step of a 7-8B-class layer (d 4096, 32 heads, head dim 128,
    context 4096, batch 16, bf16), MHA, GQA (8 kv heads) and MQA side by side. With --model: the
    model's decode step (TPOT), prefill (TTFT), KV cache and what fits, optionally over --tp devices.

    Example: costmodel predict --gpu a100
    """
    from costmodel.hardware import load_profile
    from costmodel.roofline import predict as run_predict

    hw = load_profile(gpu)
    if model_name or model_config:
        given = {k: v for k, v in dims.items() if v is not None and k not in ("batch", "context")}
        given |= {"layers": layers} if layers != 1 else {}
        given |= {"mode": mode} if mode.lower() != "incremental" else {}
        given |= {"sweep": sweep_spec} if sweep_spec else {}
        if given:
            flag = "--" + next(iter(given)).replace("_", "-")
            raise CostModelError(f"{flag} does not apply with --model (the model sets its shape; "
                                 "--batch, --context, --source, --dtype, --execution, --tp and --variant/--groups do)")
        _predict_model(hw, model_config or model_name, variant, groups, dims, dtype.lower(),
                       (execution or "fused").lower(), tp, source, overlap.lower(), as_json)
        return
    execution = execution or "unfused"
    if tp != 1 or source:
        raise CostModelError("--tp and --source apply with --model")
    workloads = make_workloads(variant, groups, mode, dtype, layers, execution, cache_append, dims)
    if csv_path and not sweep_spec:
        raise CostModelError("--csv needs --sweep DIM=RANGE")
    if sweep_spec:
        _sweep(hw, workloads, sweep_spec, overlap.lower(), csv_path, as_json)
        return
    preds = [run_predict(w, hw, overlap.lower()) for w in workloads]
    if as_json:
        dumped = [p.model_dump(mode="json") for p in preds]
        click.echo(json.dumps(dumped[0] if variant else dumped, indent=2))
    else:
        from costmodel.format import prediction_table

        click.echo(prediction_table(preds))


def _predict_model(hw, name, variant, groups, dims, dtype, execution, tp, source, overlap, as_json) -> None:
    from costmodel.models import load_model, predict_model

    model = load_model(name)
    if variant:
        kv = {"mha": model.heads, "mqa": 1}.get(variant.lower(), groups or math.gcd(model.heads, 8))
        from costmodel.program import check_divisible

        check_divisible(model.heads, kv)
        model = model.with_kv_heads(kv)
    elif groups:
        raise CostModelError("--groups with --model needs --variant gqa")
    p = predict_model(model, hw, batch=dims.get("batch") or 1, context=dims.get("context") or 4096, source=source,
                      dtype=dtype, execution=execution, tp=tp, overlap=overlap)
    click.echo(json.dumps(p.model_dump(mode="json"), indent=2) if as_json else str(p))


def _sweep(hw, workloads, spec: str, overlap: str, csv_path: str | None, as_json: bool) -> None:
    from costmodel.format import sweep_table
    from costmodel.roofline import SWEEP_DIMS, sweep_records

    name, sep, text = spec.partition("=")
    if not sep or name not in SWEEP_DIMS:
        raise CostModelError(f"invalid --sweep {spec!r}; expected DIM=RANGE with DIM one of {', '.join(SWEEP_DIMS)}")
    values = parse_range(text)
    records = sweep_records(hw, workloads, name, values, overlap)
    if csv_path:
        write_csv(csv_path, records)
    if as_json:
        click.echo(json.dumps(records, indent=2))
        return
    click.echo(sweep_table(hw, workloads, name, values, records))
    if csv_path:
        click.echo(f"wrote {csv_path}")


def write_csv(path: str, records: list[dict]) -> None:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(records[0]))
    writer.writeheader()
    writer.writerows(records)
    from costmodel.files import write_text

    write_text(path, buf.getvalue())


def _title_dims(w) -> str:
    kv = f"k={w.k}" if w.k == w.v else f"k={w.k}, v={w.v}"
    return f"d={w.d}, h={w.h}, {kv}, {w.dtype}, {w.execution}"


@main.command()
@click.option("--gpu", "gpus", multiple=True, required=True, help="device id, alias or YAML path (repeatable)")
@click.option("--groups", "-g", type=Positive, help="key/value heads of GQA (default gcd(heads, 8))")
@dim_options
@click.option("--dtype", type=DTYPES, default="bf16", show_default=True, help="storage and math dtype")
@click.option("--execution", type=click.Choice(["unfused", "fused"], case_sensitive=False), default="unfused",
              show_default=True, help="every op its own kernel, or flash-style fused attention")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="output file: .png, .svg or .pdf")
def roofline(gpus, groups, dtype, execution, out, **dims) -> None:
    """Plot every op of MHA, GQA and MQA, decode step and prefill, under each device's roofline.

    Markers sit at the op's arithmetic intensity and its attainable throughput on the first device.

    Example: costmodel roofline --gpu a100 --gpu h100 --out roofline.png
    """
    from costmodel.hardware import load_profile
    from costmodel.plots import check_output, draw_roofline, save

    check_output(out)
    hws = [load_profile(g) for g in gpus]
    sizes = {k: v for k, v in dims.items() if v is not None}
    decode = make_workloads(None, groups, "incremental", dtype, 1, execution, "inplace", sizes)
    prefill_sizes = {**sizes, "context": sizes.get("context", sizes.get("seq"))}
    prefill = make_workloads(None, groups, "batched", dtype, 1, execution, "inplace", prefill_sizes)
    w, p = decode[0], prefill[0]
    title = (f"Roofline on {', '.join(h.name for h in hws)}\n"
             f"decode step b={w.b}, m={w.m}; prefill b={p.b}, n={p.n}, m={p.m}; {_title_dims(w)}")
    save(draw_roofline(hws, decode + prefill, title), out)
    click.echo(f"wrote {out}")


@main.command("sweep")
@click.option("--gpu", required=True, help="device id, alias or YAML path")
@click.option("--x", "x_name", type=click.Choice(["context", "batch", "groups", "seq"], case_sensitive=False),
              required=True, help="the dimension on the x axis")
@click.option("--range", "range_text", required=True, metavar="RANGE",
              help="START:STOP:xFACTOR, START:STOP:STEP or a comma list, e.g. 128:32768:x2")
@click.option("--variant", type=click.Choice(["mha", "mqa", "gqa"], case_sensitive=False),
              help="one variant (default: all three; --x groups needs gqa)")
@click.option("--groups", "-g", type=Positive, help="key/value heads of GQA (default gcd(heads, 8))")
@workload_options
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="output file: .png, .svg or .pdf")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="also write the points as CSV")
def sweep_plot(gpu, x_name, range_text, variant, groups, mode, dtype, layers, execution, overlap, cache_append,
               out, csv_path, **dims) -> None:
    """Plot predicted latency (and tokens/s when decoding) against one dimension, per variant.

    The last point where weights + KV cache fit in device memory is marked on each curve.

    Example: costmodel sweep --gpu h100 --x context --range 128:32768:x2 --out sweep.png
    """
    from costmodel.hardware import load_profile
    from costmodel.plots import check_output, draw_sweep, memory_limits, save
    from costmodel.roofline import SWEEP_DIMS, check_sweep, sweep_records

    check_output(out)
    hw = load_profile(gpu)
    execution = execution or "unfused"
    x_name = x_name.lower()
    if x_name == "groups" and not variant:
        variant = "gqa"
    workloads = make_workloads(variant, groups, mode, dtype, layers, execution, cache_append, dims)
    values = parse_range(range_text)
    records = sweep_records(hw, workloads, x_name, values, overlap.lower())
    dim, linked = check_sweep(workloads, x_name, values)
    limits = memory_limits(hw, workloads, dim, values, linked)
    w = workloads[0]
    fixed = ", ".join(f"{k}={getattr(w, k)}" for k in ("b", "n", "m") if k != SWEEP_DIMS[x_name] and
                      not (k == "n" and w.mode == "incremental") and not (k == "m" and w.mode == "generate"))
    mode = {"incremental": "decode step", "generate": "generate", "batched": "prefill"}[w.mode]
    title = f"{hw.name}: {mode}, {fixed}, {_title_dims(w)}, {w.layers} layer{'s' * (w.layers > 1)}"
    if csv_path:
        write_csv(csv_path, records)
    save(draw_sweep(hw, workloads, x_name, dim, values, records, limits, title), out)
    click.echo(f"wrote {out}" + (f" and {csv_path}" if csv_path else ""))


def _torch(command: str):
    """Import torch, or stop with one line that says how to install it."""
    try:
        import torch
    except ImportError:
        raise CostModelError(
            f"costmodel {command} needs torch: pip install 'costmodel[validation]' "
            "(or pip install torch==2.13.0 for the CPU build)"
        ) from None
    return torch


def _device(torch, device: str) -> str:
    device = device.lower()
    if device == "cuda" and not torch.cuda.is_available():
        raise CostModelError("--device cuda: no CUDA GPU is available to torch here; use --device cpu")
    return device


@main.command()
@click.option("--device", type=click.Choice(["cpu", "cuda"], case_sensitive=False), default="cpu", show_default=True)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="profile YAML to write")
@click.option("--quick", is_flag=True, help="smaller sizes and shorter timing (seconds, not tens of seconds)")
def calibrate(device, out, quick) -> None:
    """Measure this device and write a hardware profile marked as measured.

    Measures matmul FLOP/s per dtype, read and copy bandwidth, per-op overhead, and the bandwidth,
    FLOP rate and overhead of each op class (projection, attention, elementwise, copy, fused attention).

    Example: costmodel calibrate --device cpu --out my_cpu.yaml
    """
    torch = _torch("calibrate")
    device = _device(torch, device)
    from costmodel.files import check_folder

    check_folder(out)
    from validation.calibrate import calibrate as run_calibration

    profile = run_calibration(device, out, quick)
    peaks = ", ".join(f"{dt} {v['value'] / 1e9:.0f} GFLOP/s" for dt, v in profile["peak_flops_per_s"].items())
    click.echo(f"wrote {out}: {profile['name']}: {peaks}; read bandwidth "
               f"{profile['memory_bandwidth_bytes_per_s']['value'] / 1e9:.1f} GB/s; per-op overhead "
               f"{profile['launch_overhead_s']['value'] * 1e6:.1f} us")


DEFAULT_PROFILE = {"cpu": "epyc_9004_2vcpu"}
CUDA_NAMES = [("H200", "h200_sxm"), ("H100 PCIe", "h100_pcie"), ("H100", "h100_sxm"), ("B200", "b200"),
              ("A100-SXM4-40GB", "a100_40gb_sxm"), ("A100 80GB PCIe", "a100_80gb_pcie"), ("A100", "a100_80gb_sxm"),
              ("L40S", "l40s"), ("L4", "l4"), ("A10G", "a10g"), ("T4", "t4"), ("V100", "v100_sxm2_32gb"),
              ("4090", "rtx_4090")]


@main.command()
@click.option("--device", type=click.Choice(["cpu", "cuda"], case_sensitive=False), default="cpu", show_default=True)
@click.option("--gpu", help="datasheet profile to compare (default: matched to the device name)")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False),
              help="calibrated profile (default: calibrate now)")
@click.option("--quick", is_flag=True, help="a small grid, for a smoke test (CI)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write the full report as JSON")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="predicted-vs-measured figure")
def validate(device, gpu, profile_path, quick, json_path, plot_path) -> None:
    """Measure every op and whole step as torch kernels and report the prediction error.

    Each case of a grid (variants x modes x batch x context x dtype x execution) is predicted with a
    datasheet profile and a calibrated one; torch's FlopCounterMode cross-checks the FLOPs.

    Example: costmodel validate --device cpu --quick --json report.json
    """
    torch = _torch("validate")
    device = _device(torch, device)
    from costmodel.files import check_folder
    from costmodel.hardware import load_profile

    if json_path:
        check_folder(json_path)
    if plot_path:
        from costmodel.plots import check_output

        check_output(plot_path)  # suffix and folder
    if gpu is None:
        if device == "cuda":
            name = torch.cuda.get_device_name()
            gpu = next((pid for key, pid in CUDA_NAMES if key in name), None)
            if gpu is None:
                raise CostModelError(f"no datasheet profile matches {name!r}; pass --gpu ID")
        else:
            gpu = DEFAULT_PROFILE["cpu"]
    profiles = {"datasheet": load_profile(gpu)}
    if profile_path:
        profiles["calibrated"] = load_profile(profile_path)
    else:
        from costmodel.hardware import HardwareProfile
        from validation.calibrate import calibrate as run_calibration

        click.echo("calibrating ...", err=True)
        profiles["calibrated"] = HardwareProfile.model_validate(run_calibration(device, None, quick))
    from validation.run import GRIDS, validate as run_validation

    grid_size = len(list(GRIDS[(device, quick)].workloads()))
    with click.progressbar(length=grid_size, label="cases", file=sys.stderr) as bar:
        def progress(cases):
            for case in cases:
                yield case
                bar.update(1)
        report = run_validation(device, profiles, quick, progress)
    from costmodel.format import validation_summary

    click.echo(validation_summary(report))
    if json_path:
        from costmodel.files import write_text

        write_text(json_path, json.dumps(report, indent=1))
        click.echo(f"wrote {json_path}")
    if plot_path:
        from costmodel.plots import draw_predicted_vs_measured, save

        rows = [{"measured_s": r["measured"]["median_s"], "predicted_s": r["predicted_calibrated_s"],
                 "group": r["group"]} for r in report["rows"]]
        env = report["environment"]
        title = (f"{env['device_name']} ({env['backend']}), torch {env['torch_version']}\n"
                 f"predicted (calibrated profile) against measured, per op and whole step")
        save(draw_predicted_vs_measured(rows, title), plot_path)
        click.echo(f"wrote {plot_path}")


@main.group()
def reproduce() -> None:
    """Reproduce the papers' results from the model, with every assumption shown."""


@reproduce.command("shazeer2019")
@click.option("--f32-storage/--no-f32-storage", default=True, show_default=True,
              help="weights, caches and activations in f32, as TensorFlow kept them")
@click.option("--concat-cache/--no-concat-cache", default=True, show_default=True,
              help="tf.concat copies the whole K/V cache every step")
@click.option("--tile-padding/--no-tile-padding", default=True, show_default=True,
              help="pad every matmul to the matrix unit's 128x128 tile")
@click.option("--f32-passes", type=click.IntRange(1, 6), default=3, show_default=True,
              help="bf16 passes per f32 matmul on the v2 matrix unit (1 = none)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def reproduce_shazeer(f32_storage, concat_cache, tile_padding, f32_passes, as_json) -> None:
    """Shazeer 2019: the asymptotic ratios, and Table 2's decoder time per token on a TPUv2 board.

    Example: costmodel reproduce shazeer2019
    """
    from costmodel.format import shazeer_table
    from costmodel.reproduce import Mechanisms, shazeer2019

    result = shazeer2019(Mechanisms(f32_storage, concat_cache, tile_padding, f32_passes))
    click.echo(json.dumps(result, indent=2) if as_json else shazeer_table(result))


@reproduce.command("gqa2023")
@click.option("--tp", type=Positive, default=8, show_default=True, help="TPU v4 chips, tensor parallel")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="write the figure (.png, .svg, .pdf)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def reproduce_gqa(tp, plot_path, as_json) -> None:
    """Ainslie et al. 2023: T5-XXL time per sample against key/value groups on TPU v4.

    Example: costmodel reproduce gqa2023 --plot gqa.png
    """
    from costmodel.format import gqa_table
    from costmodel.reproduce import gqa2023

    if plot_path:
        from costmodel.plots import check_output

        check_output(plot_path)
    result = gqa2023(chips=tp)
    click.echo(json.dumps(result, indent=2) if as_json else gqa_table(result))
    if plot_path:
        from costmodel.plots import draw_groups, save

        save(draw_groups(result), plot_path)
        if not as_json:
            click.echo(f"wrote {plot_path}")


__all__ = ["main"]
