"""`costmodel derive`: the exact counts of an attention program, its Θ forms and the paper's ratio."""

from __future__ import annotations

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
def derive(
    variant,
    groups,
    mode,
    kv_rank,
    rope_dim,
    q_rank,
    form,
    q_lora,
    dtype,
    cache_append,
    asymptotic,
    as_latex,
    fmt,
    as_json,
    **dims,
) -> None:
    """Derive exact per-op FLOP and memory counts of an attention program.

    Counts come from the einsum shapes of the paper's programs (Shazeer 2019), one grouped-query program
    for MHA, GQA and MQA, and the latent program of DeepSeek-V2 for MLA. Dimensions not given stay symbolic.

    Example: costmodel derive --variant mqa --mode generate --asymptotic
    """
    from costmodel.core.vocab import PARAMETER_DIMS
    from costmodel.counts.exact import derive as derive_counts
    from costmodel.render.text import latex, table

    mla = {"c": kv_rank, "p": rope_dim, "l": q_rank}
    if variant.lower() != "mla":
        used = [
            flag
            for flag, value in (
                ("--kv-rank", kv_rank),
                ("--rope-dim", rope_dim),
                ("--q-rank", q_rank),
                ("--form", form),
                ("--q-lora", q_lora or None),
            )
            if value is not None
        ]
        if used:
            raise CostModelError(f"{used[0]} applies to --variant mla only")
    elif q_rank is not None and not q_lora:
        raise CostModelError("--q-rank needs --q-lora (queries through a latent)")
    fmt = output_format(fmt, as_json)
    as_json = fmt == "json"
    report = derive_counts(
        variant,
        mode,
        groups=groups,
        dtype=dtype,
        cache_append=cache_append,
        dims={PARAMETER_DIMS[k]: v for k, v in given(dims).items()} | given(mla),
        form=form or MLA_FORMS[0],
        q_lora=q_lora,
    )
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
    if as_json:
        out = report.model_dump()
        if asym is not None:
            out["asymptotic_ratio"] = str(asym.ratio)
            out["asymptotic"] = asym.model_dump()
            out["assumptions"] += list(asym.assumptions)
            if beside:
                out["asymptotic"]["beside"] = {v: str(r) for v, r in beside.items()}
        emit_json(out)
    elif fmt in ("csv", "markdown"):
        emit_records(
            [
                {
                    "op": o.name,
                    "einsum": o.einsum or f"({o.kind})",
                    "flops": str(o.flops),
                    "memory_elements": str(o.memory_elements),
                }
                for o in report.ops
            ]
            + [
                {
                    "op": "total",
                    "einsum": "",
                    "flops": str(report.flops),
                    "memory_elements": str(report.memory_elements),
                }
            ],
            fmt,
        )
    else:
        click.echo(latex(report, asym) if as_latex else table(report, asym))
        if beside and not as_latex:
            click.echo("  beside it, under the paper's assumptions:")
            for v, ratio in beside.items():
                click.echo(f"    {v.upper()}  memory/arithmetic  Θ({ratio})")
