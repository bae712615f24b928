"""What the ``costmodel`` commands share: the group that turns errors into one line, the options, and
the small helpers that write files. Imports nothing heavy."""

from __future__ import annotations

import click

from costmodel.cli import capture
from costmodel.cli.click_types import Count
from costmodel.core.errors import CostModelError
from costmodel.core.invocation import command_line  # noqa: F401 - the commands' own, where they take it from
from costmodel.core.vocab import (
    CACHE_APPENDS,
    DEFAULTS,
    DTYPES,
    EXECUTIONS,
    MECHANISMS,
    OVERLAPS,
    PREDICT_MODES,
    TIMINGS,
)

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def echo_lines(lines) -> None:
    for line in lines:
        click.echo(line)


def emit_json(data) -> None:
    """Print ``data`` as JSON; a NaN or an infinity (an overflow) is an error, never invalid JSON."""
    import json

    try:
        text = json.dumps(data, indent=2, allow_nan=False)
    except ValueError:
        raise CostModelError("a result is not finite (a count or time overflowed); use smaller dimensions") from None
    click.echo(text)


class Name(click.ParamType):
    """A name or path that is not empty (an unset shell variable gives an empty one)."""

    name = "text"

    def convert(self, value, param, ctx):
        if not isinstance(value, str) or not value.strip():
            self.fail(f"{value!r} is empty; give a name or a path", param, ctx)
        return value


def _pinned(name: str, revision: str, param, ctx) -> str:
    """``name@revision``: a Hub id that no preset has, read at ``revision``."""
    from costmodel.model.hub import is_repo_id
    from costmodel.model.presets import is_preset

    repo, _, given = name.partition("@")
    if given and given != revision:
        raise click.BadParameter(f"{name!r} names revision {given}, --revision {revision}", ctx, param)
    if is_preset(repo) or not is_repo_id(repo):
        raise click.BadParameter(
            f"--revision reads a Hub model's config.json at a branch, tag or commit; {repo!r} is "
            + ("a preset" if is_preset(repo) else "not a Hub id (ORG/NAME)"),
            ctx,
            param,
        )
    return f"{repo}@{revision}"


class ModelName(Name):
    """--model: a preset, a path or a Hub id, read at ``--revision`` when one is given (:func:`revision_option`)."""

    def convert(self, value, param, ctx):
        value = super().convert(value, param, ctx)
        revision = ctx.meta.get("revision") if ctx is not None else None
        return _pinned(value, revision, param, ctx) if revision else value


def _revision(ctx, param, value):
    if value is not None:
        if ctx.params.get("model_name") is not None:  # --model came first on the command line
            ctx.params["model_name"] = _pinned(ctx.params["model_name"], value, param, ctx)
        else:
            ctx.meta["revision"] = value
    return value


def revision_option(func):
    """--revision, vLLM's and SGLang's flag: the Hub model's branch, tag or commit (as ORG/NAME@REVISION)."""
    return click.option(
        "--revision",
        callback=_revision,
        expose_value=False,
        help="with a Hub id as --model: the branch, tag or commit whose config.json is read (ORG/NAME@REVISION "
        "says the same) [default: main]",
    )(func)


def model_option(func):
    """--model, required, with --revision (the commands that search layouts: plan, recommend)."""
    func = revision_option(func)
    return click.option(
        "--model",
        "model_name",
        type=ModelName(),
        required=True,
        help="preset id or alias, a Hub id (ORG/NAME[@REVISION]), a config.json or a folder",
    )(func)


def time_limit_option(func):
    """--time-limit: seconds a search may take; past it the command answers the best found so far, labelled."""
    from costmodel.core.deadline import DEFAULT_S

    return click.option(
        "--time-limit",
        type=click.FloatRange(min=0),
        default=DEFAULT_S,
        show_default=True,
        help="seconds the search may take; past it, the best found so far, labelled as such",
    )(func)


Positive = Count(1)
NonNegative = Count(0)

#: Dtype spellings of torch and serving engines -> costmodel's names.
DTYPE_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "float8_e4m3fn": "fp8",
    "e4m3": "fp8",
    "fp8_e5m2": "fp8",
}


class DtypeChoice(click.Choice):
    """A dtype choice that also takes torch's and vLLM's spellings (bfloat16, float16, half, float32)."""

    def __init__(self, values):
        super().__init__(list(values), case_sensitive=False)

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            value = DTYPE_ALIASES.get(value.lower(), value)
        return super().convert(value, param, ctx)


class KvDtypeChoice(DtypeChoice):
    """The KV cache's dtype as vLLM and SGLang spell it (``--kv-cache-dtype``): a dtype, or ``auto`` (the
    engine's default for the checkpoint, as not giving it)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.lower() == "auto":
            return None
        return super().convert(value, param, ctx)


class FilePath(click.Path):
    """A file path option; a NUL byte, which the operating system cannot take, is a usage error."""

    def __init__(self):
        super().__init__(dir_okay=False)

    def convert(self, value, param, ctx):
        if isinstance(value, str) and "\0" in value:
            self.fail(f"{value!r} contains a NUL byte", param, ctx)
        return super().convert(value, param, ctx)


class ListOf(click.ParamType):
    """One value of ``inner``; on ``costmodel predict`` also a comma list of them (a tuple): the configurations one
    served prediction or load curve compares, each priced and labelled (:func:`costmodel.cli.load.predict_load`)."""

    def __init__(self, inner: click.ParamType):
        self.inner = inner
        self.name = inner.name

    @property
    def choices(self):
        """The inner type's choices (the page's field offers one value)."""
        return getattr(self.inner, "choices", None)

    def convert(self, value, param, ctx):
        if isinstance(value, str) and "," in value and ctx is not None and ctx.info_name == "predict":
            items = [v.strip() for v in value.split(",")]
            if len(set(items)) != len(items):
                self.fail(f"{value!r} names a configuration twice", param, ctx)
            return tuple(self.inner.convert(v, param, ctx) for v in items)
        return self.inner.convert(value, param, ctx)

    def get_metavar(self, param, ctx=None):
        return self.inner.get_metavar(param, ctx) if hasattr(self.inner, "get_metavar") else None


def choices(values) -> click.Choice:
    return click.Choice(list(values), case_sensitive=False)


#: option name -> help; the names are those of Workload.create
DIM_OPTIONS = {
    "batch": f"batch size b [default: {DEFAULTS['batch']}]",
    "seq": f"query positions n (tokens generated in generate mode) [default: {DEFAULTS['seq']}; 1 in incremental]",
    "context": "memory positions m (cached positions before the step in incremental mode) "
    f"[default: {DEFAULTS['context']}; = seq in batched]",
    "d_model": f"model dimension d [default: {DEFAULTS['d_model']}]",
    "heads": f"query heads h [default: {DEFAULTS['heads']}]",
    "head_dim": "key dimension per head k [default: d/h]",
    "value_dim": "value dimension per head v [default: d/h]",
}


#: Engine spellings accepted for the same options (vLLM's and SGLang's flags).
OPTION_ALIASES = {"batch": ("--batch-size",)}


def dim_options(func):
    """One option per numeric dimension (--batch, --seq, ...); --context may be 0 (an empty cache)."""
    for name, text in reversed(DIM_OPTIONS.items()):
        kind = NonNegative if name == "context" else Positive
        func = click.option(f"--{name.replace('_', '-')}", *OPTION_ALIASES.get(name, ()), name, type=kind, help=text)(
            func
        )
    return func


def given(dims: dict) -> dict:
    return {k: v for k, v in dims.items() if v is not None}


def _options(*options):
    def apply(func):
        for option in reversed(options):
            func = option(func)
        return func

    return apply


dtype_option = click.option(
    "--dtype",
    type=DtypeChoice(DTYPES),
    default=DEFAULTS["dtype"],
    show_default=True,
    help="storage and math dtype (sets bytes per element; bfloat16, float16, float32 also)",
)
FORMATS = ("table", "json", "csv", "markdown")
format_option = click.option(
    "--format",
    "fmt",
    type=choices(FORMATS),
    default="table",
    show_default=True,
    help="how to print: an aligned table, JSON, CSV or a markdown table",
)


def output_format(fmt: str, as_json: bool) -> str:
    """--json is --format json."""
    if as_json and fmt not in ("table", "json"):
        raise CostModelError(f"--json and --format {fmt} disagree; give one")
    return "json" if as_json else fmt.lower()


def emit_records(records: list[dict], fmt: str) -> None:
    """Rows of a table as CSV or markdown."""
    from costmodel.render.records import records_csv, records_markdown

    click.echo((records_csv if fmt == "csv" else records_markdown)(records), nl=fmt != "csv")


def emit(fmt: str, dumped: list, records: list[dict], table, single: bool) -> None:
    """Reports in the chosen format: JSON (one object where ``single``, else an array), CSV or markdown rows, or
    the table ``table()`` renders."""
    if capture.ON is not None:  # --html: every format kept, and the one asked printed from what was kept
        kept = capture.keep(dumped[0] if single else dumped, records, table).get(fmt)
        if kept is not None:
            click.echo(kept, nl=False)
            return
    if fmt == "json":
        emit_json(dumped[0] if single else dumped)
    elif fmt in ("csv", "markdown"):
        emit_records(records, fmt)
    else:
        click.echo(table())


groups_option = click.option("--groups", "-g", type=Positive, help="key/value heads of GQA (default gcd(heads, 8))")
json_option = click.option("--json", "as_json", is_flag=True, help="print JSON (--format json)")
routing_option = click.option(
    "--routing",
    metavar="ROUTING",
    help="with a mixture-of-experts --model: how the router spreads tokens over the experts: uniform (each token's "
    "experts at random; the default), balanced (every expert the same share) or power-law:ALPHA (skewed; the "
    "busiest device is timed)",
)


def variant_option(values, text: str, **kwargs):
    """``--variant`` over ``values`` (the grouped-query family, or with MLA), its help saying what it does here."""
    return click.option("--variant", type=choices(values), help=text, **kwargs)


def sweep_spec(spec: str, dims) -> tuple[str, str]:
    """``DIM=RANGE`` of a ``--sweep`` as (dimension name with underscores, range text); an error naming the
    dimensions ``dims`` allows."""
    name, sep, text = spec.partition("=")
    name = name.replace("-", "_")
    if not sep or name not in dims:
        raise CostModelError(
            f"invalid --sweep {spec!r}; expected DIM=RANGE with DIM one of "
            f"{', '.join(d.replace('_', '-') for d in dims)}"
        )
    return name, text


max_points_option = click.option(
    "--max-points",
    type=click.IntRange(1, 10**7),
    default=DEFAULTS["max_points"],
    show_default=True,
    help="the most points a --sweep or --range may hold",
)

#: Devices to price on, the same option for every command that prices.
gpus_option = click.option(
    "--gpu",
    "gpus",
    multiple=True,
    required=True,
    type=Name(),
    help="hardware id or alias (a100, h100, tpu-v5e, ...) or a YAML profile path; repeat to compare devices",
)
#: The mechanism switches of the fitted time model.
timing_option = click.option(
    "--timing",
    type=choices(TIMINGS),
    default=DEFAULTS["timing"],
    show_default=True,
    help="the time predicted: a CUDA-graph replay (what serving engines run), kernel "
    "durations only, or host wall time around eager ops",
)
without_option = click.option(
    "--without",
    "without",
    multiple=True,
    type=choices((*MECHANISMS, "all")),
    help="switch a fitted mechanism off to see its share (repeatable; all: the datasheet roofline)",
)


workload_options = _options(
    click.option(
        "--mode",
        type=choices(PREDICT_MODES),
        default=DEFAULTS["mode"],
        show_default=True,
        help="batched attention (prefill), one decode step, or n decode steps",
    ),
    dim_options,
    dtype_option,
    click.option("--layers", type=Positive, default=DEFAULTS["layers"], show_default=True, help="attention layers"),
    click.option(
        "--execution",
        type=choices(EXECUTIONS),
        help=f"every op its own kernel, or flash-style fused attention "
        f"[default: {DEFAULTS['execution']}; {DEFAULTS['model_execution']} with --model]",
    ),
    click.option(
        "--overlap",
        type=choices(OVERLAPS),
        default=DEFAULTS["overlap"],
        show_default=True,
        help="op time = max(compute, memory) or their sum",
    ),
    click.option(
        "--cache-append",
        type=choices(CACHE_APPENDS),
        default=DEFAULTS["cache_append"],
        show_default=True,
        help="KV-cache append in place, or a full copy",
    ),
    timing_option,
    without_option,
)


def csv_to_stdout(csv_path: str, fmt: str) -> str:
    """The format left to print when ``--csv -`` already writes the rows to standard output: none (``"none"``);
    another format asked for as well would interleave with it, an error."""
    if csv_path != "-":
        return fmt
    if fmt != "table":
        raise CostModelError(f"--csv - and --format {fmt} both write standard output; give one")
    return "none"


def check_writable(path: str) -> None:
    from costmodel.core.files import check_folder

    check_folder(path)


def write_csv(path: str, records: list[dict]) -> None:
    import csv
    import io

    from costmodel.core.files import write_text

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(records[0]))
    writer.writeheader()
    writer.writerows(records)
    write_text(path, buf.getvalue())


def title_dims(w) -> str:
    kv = f"k={w.k}" if w.k == w.v else f"k={w.k}, v={w.v}"
    return f"d={w.d}, h={w.h}, {kv}, {w.dtype}, {w.execution}"
