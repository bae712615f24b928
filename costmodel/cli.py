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
    """One option per numeric dimension (--batch, --seq, ...)."""
    for name, (_, text) in reversed(DIM_OPTIONS.items()):
        func = click.option(f"--{name.replace('_', '-')}", name, type=Positive, help=text)(func)
    return func


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
@click.option("--dtype", type=click.Choice(["fp32", "tf32", "bf16", "fp16", "fp8", "int8"], case_sensitive=False),
              default="bf16", show_default=True, help="storage dtype (sets bytes per element)")
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


__all__ = ["main"]
