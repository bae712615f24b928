"""`costmodel derive`: the exact counts of an attention program, its Θ forms and the paper's ratio."""

from __future__ import annotations

from types import SimpleNamespace

import click

from costmodel.cli.html import html_option
from costmodel.cli.options import (
    Positive,
    choices,
    dim_options,
    dtype_option,
    emit_json,
    emit_records,
    format_option,
    given,
    groups_option,
    json_option,
    output_format,
    variant_option,
)
from costmodel.core.errors import CostModelError
from costmodel.core.vocab import CACHE_APPENDS, DERIVE_VARIANTS, MLA_FORMS, MODES


@click.command()
@variant_option(
    DERIVE_VARIANTS,
    "attention variant: multi-head, multi-query, grouped-query or multi-head latent (mla)",
    default="mha",
    show_default=True,
)
@groups_option
@click.option(
    "--mode",
    type=choices(MODES),
    default="incremental",
    show_default=True,
    help="batched attention, one decode step, n decode steps, or the paper's one-query forms",
)
@dim_options
@click.option("--kv-rank", type=Positive, help="mla: latent rank c (DeepSeek-V2: 512)")
@click.option("--rope-dim", type=Positive, help="mla: decoupled rotary key dimension p (DeepSeek-V2: 64)")
@click.option("--q-rank", type=Positive, help="mla: query latent rank l (queries through a latent)")
@click.option(
    "--form",
    type=choices(MLA_FORMS),
    help="mla: attend in latent space (absorbed, the default) or materialise per-head keys and values (naive)",
)
@click.option("--q-lora", is_flag=True, help="mla: queries through a latent of rank l (DeepSeek-V2 and V3)")
@dtype_option
@click.option(
    "--cache-append",
    type=choices(CACHE_APPENDS),
    default="inplace",
    show_default=True,
    help="KV-cache append: write the new position, or copy the cache (tf.concat)",
)
@click.option("--asymptotic", is_flag=True, help="add the Θ forms under the paper's assumptions")
@click.option("--latex", "as_latex", is_flag=True, help="print a LaTeX tabular")
@format_option
@json_option
@html_option()
def derive(**options) -> None:
    """Derive exact per-op FLOP and memory counts of an attention program.

    Counts come from the einsum shapes of the paper's programs (Shazeer 2019), one grouped-query program
    for MHA, GQA and MQA, and the latent program of DeepSeek-V2 for MLA. Dimensions not given stay symbolic.

    Example: costmodel derive --variant mqa --mode generate --asymptotic
    """
    o = SimpleNamespace(**{k: options.pop(k) for k in _DERIVE_PARAMS})
    dims = options
    from costmodel.core.vocab import PARAMETER_DIMS
    from costmodel.counts.exact import derive as derive_counts

    mla = {"c": o.kv_rank, "p": o.rope_dim, "l": o.q_rank}
    _check_mla_flags(o)
    o.fmt = output_format(o.fmt, o.as_json)
    o.as_json = o.fmt == "json"
    report = derive_counts(
        o.variant,
        o.mode,
        groups=o.groups,
        dtype=o.dtype,
        cache_append=o.cache_append,
        dims={PARAMETER_DIMS[k]: v for k, v in given(dims).items()} | given(mla),
        form=o.form or MLA_FORMS[0],
        q_lora=o.q_lora,
    )
    asym, beside = _asymptotic(report, o.asymptotic)
    _emit(report, asym, beside, o)


def _check_mla_flags(o) -> None:
    """The latent's flags apply to --variant mla, and --q-rank with --q-lora."""
    if o.variant.lower() != "mla":
        used = [
            flag
            for flag, value in (
                ("--kv-rank", o.kv_rank),
                ("--rope-dim", o.rope_dim),
                ("--q-rank", o.q_rank),
                ("--form", o.form),
                ("--q-lora", o.q_lora or None),
            )
            if value is not None
        ]
        if used:
            raise CostModelError(f"{used[0]} applies to --variant mla only")
    elif o.q_rank is not None and not o.q_lora:
        raise CostModelError("--q-rank needs --q-lora (queries through a latent)")


def _asymptotic(report, asymptotic: bool):
    """(the Θ forms under the paper's assumptions, and for MLA the grouped-query family's ratios beside them)."""
    asym = None
    if asymptotic:
        from costmodel.counts.asymptotic import analyze

        if report.substitutions:
            raise CostModelError(
                f"--asymptotic needs symbolic dimensions; drop the numeric ones ({', '.join(report.substitutions)})"
            )
        if report.mode in ("single-query", "dot-product"):
            raise CostModelError(f"--asymptotic applies to modes batched, incremental and generate, not {report.mode}")
        asym = analyze(report)
    beside = {}
    if asym is not None and report.variant == "mla":  # the grouped-query family's ratios, same mode and assumptions
        from costmodel.counts.asymptotic import asymptotic_ratio

        beside = {v: asymptotic_ratio(v, report.mode) for v in ("mha", "gqa", "mqa")}
    return asym, beside


def _emit(report, asym, beside: dict, o) -> None:
    """The counts as JSON, CSV or Markdown records, a table or LaTeX."""
    from costmodel.render.text import latex, table

    if o.as_json:
        out = report.model_dump()
        if asym is not None:
            out["asymptotic_ratio"] = str(asym.ratio)
            out["asymptotic"] = asym.model_dump()
            out["assumptions"] += list(asym.assumptions)
            if beside:
                out["asymptotic"]["beside"] = {v: str(r) for v, r in beside.items()}
        emit_json(out)
    elif o.fmt in ("csv", "markdown"):
        emit_records(
            [
                {
                    "op": op.name,
                    "einsum": op.einsum or f"({op.kind})",
                    "flops": str(op.flops),
                    "memory_elements": str(op.memory_elements),
                }
                for op in report.ops
            ]
            + [
                {
                    "op": "total",
                    "einsum": "",
                    "flops": str(report.flops),
                    "memory_elements": str(report.memory_elements),
                }
            ],
            o.fmt,
        )
    else:
        click.echo(latex(report, asym) if o.as_latex else table(report, asym))
        if beside and not o.as_latex:
            click.echo("  beside it, under the paper's assumptions:")
            for v, ratio in beside.items():
                click.echo(f"    {v.upper()}  memory/arithmetic  Θ({ratio})")


#: derive's own parameters; the others are the workload's dimensions
_DERIVE_PARAMS = (
    "variant",
    "groups",
    "mode",
    "kv_rank",
    "rope_dim",
    "q_rank",
    "form",
    "q_lora",
    "dtype",
    "cache_append",
    "asymptotic",
    "as_latex",
    "fmt",
    "as_json",
)
