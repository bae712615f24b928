"""The ``costmodel`` command line. Commands only parse options and format report objects."""

from __future__ import annotations

import json

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


def lower(value: str | None) -> str | None:
    return value.lower() if value else value


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
                     default="unfused", show_default=True,
                     help="every op its own kernel, or flash-style fused attention"),
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


SWEEP_DIMS = {"batch": "b", "seq": "n", "context": "m", "d-model": "d", "heads": "h", "groups": "g",
              "head-dim": "k", "value-dim": "v"}


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


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so an interrupted run leaves nothing half-written."""
    import os
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CostModelError(f"cannot write {path}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".costmodel-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


@main.command()
@click.option("--gpu", required=True, help="hardware id or alias (a100, h100, tpu-v5e, ...) or a YAML profile path")
@click.option("--variant", type=click.Choice(["mha", "mqa", "gqa"], case_sensitive=False),
              help="one variant (default: MHA, GQA and MQA side by side)")
@click.option("--groups", "-g", type=Positive, help="key/value heads of GQA (default gcd(heads, 8))")
@workload_options
@click.option("--sweep", "sweep_spec", metavar="DIM=RANGE",
              help=f"sweep one dimension ({', '.join(SWEEP_DIMS)}), e.g. context=128:32768:x2")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="with --sweep: also write a CSV file")
@click.option("--json", "as_json", is_flag=True, help="print JSON (an array when variants are compared)")
def predict(gpu, variant, groups, mode, dtype, layers, execution, overlap, cache_append, sweep_spec, csv_path,
            as_json, **dims) -> None:
    """Predict per-op and total latency of attention on a device with a roofline.

    With no workload flags: one decode step of a 7-8B-class layer (d 4096, 32 heads, head dim 128,
    context 4096, batch 16, bf16), MHA, GQA (8 kv heads) and MQA side by side.

    Example: costmodel predict --gpu a100
    """
    from costmodel.hardware import load_profile
    from costmodel.roofline import predict as run_predict

    hw = load_profile(gpu)
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


def _sweep(hw, workloads, spec: str, overlap: str, csv_path: str | None, as_json: bool) -> None:
    from costmodel.format import si
    from costmodel.roofline import sweep

    name, sep, text = spec.partition("=")
    if not sep or name not in SWEEP_DIMS:
        raise CostModelError(f"invalid --sweep {spec!r}; expected DIM=RANGE with DIM one of {', '.join(SWEEP_DIMS)}")
    dim, values = SWEEP_DIMS[name], parse_range(text)
    if dim == "m" and workloads[0].mode == "generate":
        raise CostModelError("generate mode has no context to sweep (it starts from an empty cache); sweep seq")
    if dim == "g":
        if any(w.variant != "gqa" for w in workloads):
            raise CostModelError("--sweep groups needs --variant gqa")
        bad = [x for x in values if x < 1 or workloads[0].h % x]
        if bad:
            raise CostModelError(f"groups {bad} do not divide heads {workloads[0].h}")
    if dim != "m" and min(values) < 1:
        raise CostModelError(f"{name} values must be >= 1, got {min(values)}")
    results = [(w, sweep(w, hw, dim, values, overlap)) for w in workloads]
    per_token = {"incremental": 1, "generate": None, "batched": None}
    records = []
    for w, r in results:
        for i, x in enumerate(values):
            steps = r["n"][i] if dim == "n" else w.n
            time = float(r["time_s"][i])
            tokens = w.b if w.mode == "incremental" else (r["b"][i] if dim == "b" else w.b) * steps
            if dim == "b" and w.mode == "incremental":
                tokens = r["b"][i]
            records.append({
                name: x, "variant": w.variant, "g": int(r["g"][i]) if dim == "g" else w.g, "time_s": time,
                "per_token_s": time if per_token[w.mode] else (time / steps if w.mode == "generate" else None),
                "tokens_per_s": float(tokens) / time, "flops": float(r["flops"][i]), "bytes": float(r["bytes"][i]),
                "kv_cache_bytes": float(r["kv_cache_bytes"][i]), "fits": bool(r["fits"][i]),
            })
    if csv_path:
        import csv
        import io

        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
        write_atomic(csv_path, buf.getvalue())
    if as_json:
        click.echo(json.dumps(records, indent=2))
        return
    click.echo(f"{hw.name} [{hw.id}], sweep of {name} ({dim}); time per step or call; * = does not fit in memory")
    labels = [f"{w.variant.upper()} (g={w.g})" if dim != "g" else w.variant.upper() for w, _ in results]
    rows = [(name, *labels)]
    for i, x in enumerate(values):
        rows.append((str(x), *(
            si(rec["time_s"], "s") + ("" if rec["fits"] else " *")
            for rec in records[i::len(values)]
        )))
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(c.rjust(wd) for c, wd in zip(r, widths)))
    if csv_path:
        click.echo(f"wrote {csv_path}")


__all__ = ["main"]
