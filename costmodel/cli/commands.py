"""The ``costmodel`` command line: each command parses its options, calls the library and prints.

Nothing heavy is imported at start-up (``costmodel --help`` loads neither sympy nor numpy); every
command imports what it uses.
"""

from __future__ import annotations

import click

from costmodel import __version__
from costmodel.cli import explain as cli_explain
from costmodel.cli import figures as cli_figures
from costmodel.cli import web as cli_web
from costmodel.cli.html import html_option
from costmodel.cli.load import LOAD_KEYS, engine_options, predict_load, step_layout, wants_load
from costmodel.cli.options import (
    CONTEXT,
    ErrorLineGroup,
    FilePath,
    Positive,
    check_writable,
    choices,
    csv_to_stdout,
    dim_options,
    dtype_option,
    echo_lines,
    emit_json,
    emit_records,
    format_option,
    given,
    gpus_option,
    groups_option,
    json_option,
    max_points_option,
    output_format,
    routing_option,
    variant_option,
    workload_options,
    write_csv,
)
from costmodel.cli.options import (
    sweep_spec as parse_sweep_spec,
)
from costmodel.cli.plan import plan as plan_command
from costmodel.cli.serving import capacity, model_options
from costmodel.core.errors import CostModelError
from costmodel.core.files import wrote
from costmodel.core.vocab import CACHE_APPENDS, DEFAULTS, DERIVE_VARIANTS, MLA_FORMS, MODES, SWEEP_DIMS


@click.group(cls=ErrorLineGroup, context_settings=CONTEXT)
@click.version_option(version=__version__, package_name="costmodel-llm")
def main() -> None:
    """Exact FLOP and memory costs of MHA, GQA and MQA attention, and what they cost on an accelerator."""


@main.command()
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


@main.group()
def hardware() -> None:
    """List and show the hardware profiles (one YAML file per device, every number sourced)."""


@hardware.command("list")
@format_option
@json_option
def hardware_list(fmt, as_json) -> None:
    """List the shipped hardware profiles.

    Example: costmodel hardware list
    """
    from costmodel.hardware.catalog import load_all
    from costmodel.price.origin import efficiency_status
    from costmodel.render.models import hardware_records, hardware_table

    fmt = output_format(fmt, as_json)
    profiles = load_all()
    status = {p.id: efficiency_status(p) for p in profiles}
    if fmt == "json":
        emit_json([p.model_dump(mode="json") for p in profiles])
    elif fmt in ("csv", "markdown"):
        emit_records(hardware_records(profiles, status), fmt)
    else:
        click.echo(hardware_table(profiles, status))


@hardware.command("show")
@click.argument("name")
@json_option
def hardware_show(name, as_json) -> None:
    """Show one profile by id, alias (case-insensitive) or YAML path, with the source of every number.

    Example: costmodel hardware show h100
    """
    from costmodel.hardware.catalog import load_profile
    from costmodel.render.models import hardware_detail

    profile = load_profile(name)
    if as_json:
        emit_json(profile.model_dump(mode="json"))
    else:
        from costmodel.price.origin import attention_kind, attention_reference, reference_for

        ref = reference_for(profile) if profile.efficiency is None and profile.kind == "gpu" else None
        attention = attention_reference(profile, ref) if ref is not None else None
        click.echo(
            hardware_detail(
                profile,
                ref.id if ref is not None else None,
                (attention.id, attention_kind(profile)) if attention is not None else None,
            )
        )


@main.command()
@gpus_option
@variant_option(
    DERIVE_VARIANTS,
    "one variant (default: MHA, GQA and MQA side by side); with --model: re-price the "
    "model with this attention layout (mla: DeepSeek-V2's latent of 4 x head dim)",
)
@groups_option
@workload_options
@click.option(
    "--sweep",
    "sweep_spec",
    metavar="DIM=RANGE",
    help=f"sweep one dimension ({', '.join(k.replace('_', '-') for k in SWEEP_DIMS)}; with --model: "
    "batch, context, input-len, output-len), e.g. context=128:32768:x2",
)
@click.option("--csv", "csv_path", type=FilePath(), help="with --sweep: also write a CSV file")
@max_points_option
@model_options
@click.option("--model-config", type=FilePath(), help="a Hugging Face config.json to read the model from")
@click.option("--source", type=Positive, help="with an encoder-decoder --model: source (encoder) length")
@click.option(
    "--variants",
    is_flag=True,
    help="with --model: also its MHA, GQA, MQA and MLA (DeepSeek-V2's latent of 4 x head dim) versions, side by side",
)
@routing_option
@engine_options
@format_option
@click.option("--json", "as_json", is_flag=True, help="print JSON (--format json; an array when several are compared)")
@html_option(refuse={"sweep_spec": "--sweep (`costmodel sweep --out FILE` draws a sweep)", "csv_path": "--csv"})
def predict(
    gpus,
    variant,
    groups,
    mode,
    dtype,
    layers,
    execution,
    overlap,
    cache_append,
    timing,
    without,
    sweep_spec,
    csv_path,
    max_points,
    model_name,
    tp,
    kv_heads,
    weight_dtype,
    kv_dtype,
    mla_form,
    input_len,
    output_len,
    model_config,
    source,
    variants,
    routing,
    fmt,
    as_json,
    **dims,
) -> None:
    """Predict per-op and total latency of attention, or of a whole model, on one or more devices.

    With no workload flags: one decode step of a 7-8B-class layer (d 4096, 32 heads, head dim 128,
    context 4096, batch 16, bf16), MHA, GQA (8 kv heads) and MQA side by side. With --model: the
    model's decode step (TPOT), prefill (TTFT), KV cache and what fits, optionally over --tp devices;
    with --input-len and --output-len: a request's TTFT, TPOT and end-to-end latency; with --engine and
    --concurrency (or --request-rate): the model served under load, as a benchmark client measures it.

    Example: costmodel predict --gpu a100

    Example: costmodel predict --gpu h100 --model Qwen/Qwen3-32B --tp 2 --engine vllm --concurrency 32
    --input-len 1024 --output-len 512
    """
    from costmodel.hardware.catalog import load_profile

    load = {k: dims.pop(k) for k in LOAD_KEYS}
    fmt = output_format(fmt, as_json)
    hws = [load_profile(g) for g in gpus]
    if model_name and model_config:
        raise CostModelError("give --model or --model-config, not both")
    if model_name or model_config:
        extra = {k: v for k, v in dims.items() if v is not None and k not in ("batch", "context")}
        extra |= {"layers": layers} if layers != 1 else {}
        extra |= {"mode": mode} if mode.lower() != "incremental" else {}
        if extra:
            flag = "--" + next(iter(extra)).replace("_", "-")
            raise CostModelError(
                f"{flag} does not apply with --model (the model sets its shape; "
                "--batch, --context, --source, --dtype, --execution, --tp and --variant/--groups do)"
            )
        from costmodel.cli.serving import conventions, load_layouts, predict_models

        layouts = load_layouts(model_config or model_name, variant, groups, kv_heads, variants, routing)
        step = step_layout(load)
        if wants_load(load):
            if sweep_spec or dims["batch"] is not None or dims["context"] is not None:
                raise CostModelError(
                    "--sweep, --batch and --context do not apply to a served model (the engine "
                    "forms its own batches; --max-num-seqs limits them)"
                )
            predict_load(
                hws,
                layouts,
                fmt,
                load,
                input_len=input_len,
                output_len=output_len,
                pricing=conventions(dtype, execution, tp, overlap, timing, without, weight_dtype, kv_dtype, mla_form),
            )
            return
        predict_models(
            hws,
            layouts,
            fmt,
            batch=dims["batch"],
            context=dims["context"],
            input_len=input_len,
            output_len=output_len,
            sweep_spec=sweep_spec,
            csv_path=csv_path,
            max_points=max_points,
            source=source,
            pricing=conventions(dtype, execution, tp, overlap, timing, without, weight_dtype, kv_dtype, mla_form)
            | step,
        )
        return
    if wants_load(load):
        raise CostModelError("--engine, --concurrency and --request-rate apply with --model")
    model_only = [
        flag
        for flag, value in (
            ("--tp", tp != 1 or None),
            ("--source", source),
            ("--kv-heads", kv_heads),
            ("--weight-dtype", weight_dtype),
            ("--kv-dtype", kv_dtype),
            ("--mla-form", mla_form),
            ("--input-len", input_len),
            ("--output-len", output_len),
            ("--variants", variants or None),
            ("--routing", routing),
        )
        if value
    ]
    if model_only:
        raise CostModelError(f"{model_only[0]} applies with --model")
    if variant and variant.lower() == "mla":
        raise CostModelError(
            "--variant mla applies with --model (a model gives the latent's widths) or in "
            "`costmodel derive --variant mla`"
        )
    if csv_path is not None and not sweep_spec:
        raise CostModelError("--csv needs --sweep DIM=RANGE")
    from costmodel.attention.workload import workloads

    chosen = workloads(
        variant,
        groups,
        mode,
        dtype=dtype,
        layers=layers,
        execution=execution or DEFAULTS["execution"],
        cache_append=cache_append,
        **given(dims),
    )
    if sweep_spec:
        attention_sweep(hws, chosen, sweep_spec, fmt, csv_path, overlap, max_points, timing, without)
    else:
        attention_predict(hws, chosen, bool(variant), fmt, overlap, timing, without)


def attention_predict(hws: list, chosen: list, one_variant: bool, fmt: str, overlap, timing, without) -> None:
    """``costmodel predict`` of attention workloads: every op of each variant on each device."""
    from costmodel.attention.roofline import compare

    results = [compare(chosen, hw, overlap, timing, without) for hw in hws]
    if fmt == "json":
        dumped = [r.model_dump(mode="json") for r in results]
        dumped = [d[0] if one_variant else d for d in dumped]
        emit_json(dumped[0] if len(hws) == 1 else dumped)
    elif fmt in ("csv", "markdown"):
        from costmodel.render.records import attention_records

        emit_records([row for hw, r in zip(hws, results) for row in attention_records(hw, r)], fmt)
    elif len(hws) == 1:
        click.echo(str(results[0]))
    else:
        from costmodel.render.text import attention_devices_table

        click.echo(attention_devices_table(hws, results))


def attention_sweep(
    hws: list, chosen: list, spec: str, fmt: str, csv_path, overlap, max_points, timing, without
) -> None:
    """``costmodel predict --sweep DIM=RANGE`` of attention workloads: streamed in chunks to a file or standard
    output, or held whole for an aligned table."""
    from costmodel.attention.sweeps import plan_sweep, swept

    name, text = parse_sweep_spec(spec, SWEEP_DIMS)
    if csv_path is not None:
        check_writable(csv_path)
        fmt = csv_to_stdout(csv_path, fmt)
    plans = [plan_sweep(chosen, hw, name, text, overlap, max_points, timing, without) for hw in hws]
    points = len(plans[0].values) * len(chosen) * len(hws)
    if fmt != "table" or (csv_path is not None and points > DEFAULTS["max_points"]):
        # streamed, a chunk at a time: memory does not grow with the points (a table is aligned whole)
        stream_sweep(hws, plans, fmt, csv_path)
        if fmt == "table":
            echo_lines(
                [f"wrote {csv_path} ({points} rows; a table of more than {DEFAULTS['max_points']} rows is not printed)"]
            )
        return
    results = [swept(plan) for plan in plans]
    records = (
        results[0].records
        if len(hws) == 1
        else [{"device": hw.id, **r} for hw, result in zip(hws, results) for r in result.records]
    )
    if csv_path is not None:
        write_csv(csv_path, records)
    if fmt == "table":
        if len(results) == 1:
            click.echo(str(results[0]))
        else:
            from costmodel.render.text import sweeps_table

            click.echo(sweeps_table(results))
        echo_lines(wrote(csv_path))


def stream_sweep(hws: list, plans: list, fmt: str, csv_path: str | None) -> None:
    """A sweep's records to the CSV file and to standard output (csv, markdown or json), a chunk at a time."""
    import contextlib
    import csv
    import json

    from costmodel.core.files import atomic_path
    from costmodel.render.records import records_csv, records_markdown

    def chunks():
        for hw, plan in zip(hws, plans):
            for chunk in plan.chunks():
                yield [{"device": hw.id, **r} for r in chunk] if len(hws) > 1 else chunk

    with contextlib.ExitStack() as stack:
        writer = None
        if csv_path is not None and csv_path != "-":
            out = stack.enter_context(
                open(stack.enter_context(atomic_path(csv_path)), "w", newline="", encoding="utf-8")
            )
        first = True
        for chunk in chunks():
            if csv_path is not None and csv_path != "-":
                if writer is None:
                    writer = csv.DictWriter(out, fieldnames=list(chunk[0]))
                    writer.writeheader()
                writer.writerows(chunk)
            if fmt == "csv" or csv_path == "-":
                text = records_csv(chunk)
                click.echo(text if first else text.split("\n", 1)[1], nl=False)
            elif fmt == "markdown":
                text = records_markdown(chunk)
                click.echo(text if first else text.split("\n", 2)[2])
            elif fmt == "json":
                try:
                    body = ",\n".join(
                        "\n".join("  " + line for line in json.dumps(r, indent=2, allow_nan=False).splitlines())
                        for r in chunk
                    )
                except ValueError:
                    raise CostModelError(
                        "a result is not finite (a count or time overflowed); use smaller dimensions"
                    ) from None
                click.echo(("[\n" if first else ",\n") + body, nl=False)
            first = False
        if fmt == "json":
            click.echo("\n]")


@main.group()
def models() -> None:
    """List and show the model presets (one YAML file per model, every number sourced)."""


@models.command("list")
@format_option
@json_option
def models_list(fmt, as_json) -> None:
    """List the shipped model presets: parameters, attention, experts, windows.

    Example: costmodel models list
    """
    from costmodel.model.memory import model_facts
    from costmodel.model.presets import load_model, preset_ids
    from costmodel.render.models import model_records, models_table

    fmt = output_format(fmt, as_json)
    presets = [load_model(pid) for pid in preset_ids()]
    facts = {m.id: model_facts(m) for m in presets}
    if fmt == "json":
        emit_json([p.model_dump(mode="json") for p in presets])
    elif fmt in ("csv", "markdown"):
        emit_records(model_records(presets, facts), fmt)
    else:
        click.echo(models_table(presets, facts))


@models.command("show")
@click.argument("name")
@json_option
def models_show(name, as_json) -> None:
    """Show one model by preset id or alias, or a Hugging Face config.json (or a folder holding one).

    Example: costmodel models show deepseek-v2-lite
    """
    from costmodel.model.presets import load_model
    from costmodel.render.models import model_detail

    m = load_model(name)
    if as_json:
        from costmodel.model.memory import active_params, param_groups

        emit_json({**m.model_dump(mode="json"), "params": param_groups(m), "active_params": active_params(m)})
    else:
        from costmodel.model.memory import model_facts

        click.echo(model_detail(m, model_facts(m)))


#: predict's options by what they ask, as its --help lists them.
predict.panels = {
    **dict.fromkeys(("gpus", "fmt", "as_json", "html_path"), "Devices and output"),
    **dict.fromkeys(
        (
            "variant",
            "groups",
            "mode",
            "batch",
            "seq",
            "context",
            "d_model",
            "heads",
            "head_dim",
            "value_dim",
            "dtype",
            "layers",
            "execution",
            "overlap",
            "cache_append",
            "timing",
            "without",
            "sweep_spec",
            "csv_path",
            "max_points",
        ),
        "One attention layer (the default), and sweeps",
    ),
    **dict.fromkeys(
        (
            "model_name",
            "model_config",
            "tp",
            "kv_heads",
            "weight_dtype",
            "kv_dtype",
            "mla_form",
            "input_len",
            "output_len",
            "source",
            "variants",
            "routing",
            "mxfp4_activations",
        ),
        "A whole model (--model): one step, or one request with --input-len and --output-len",
    ),
    **dict.fromkeys(
        (
            "engine_name",
            "concurrency",
            "client_connections",
            "request_rate",
            "burstiness",
            "num_requests",
            "warmup_requests",
            "length_dist",
            "spread",
            "lengths_file",
            "frontend",
            "evaluator",
        ),
        "Served under load (--engine with --concurrency or --request-rate)",
    ),
    **dict.fromkeys(
        (
            "max_num_batched_tokens",
            "max_num_seqs",
            "memory_fraction",
            "page_size",
            "chunked_prefill",
            "prefix_caching",
            "async_scheduling",
        ),
        "Engine flags (each engine's own default where not set)",
    ),
    **dict.fromkeys(
        ("expert_parallel", "expert_parallel_size", "attention_dp", "replicas", "pipeline_parallel"), "Layout"
    ),
    **dict.fromkeys(
        (
            "disaggregated",
            "prefill_tp",
            "prefill_workers",
            "prefill_max_num_seqs",
            "prefill_expert_parallel",
            "prefill_attention_dp",
            "decode_tp",
            "decode_workers",
            "decode_max_num_seqs",
            "decode_expert_parallel",
            "decode_attention_dp",
            "decode_gpu",
            "kv_link_bandwidth",
        ),
        "Disaggregated prefill and decode pools (--disaggregated)",
    ),
}

for command in (
    cli_explain.explain,
    cli_web.web,
    cli_web.serve,
    capacity,
    plan_command,
    cli_figures.roofline,
    cli_figures.sweep_plot,
    cli_figures.calibrate,
    cli_figures.validate,
    cli_figures.reproduce,
):
    main.add_command(command)

__all__ = ["main"]
