"""The whole-model side of the command line: a model on one or more devices, a request's latency, capacity
under latency targets, whole-model sweeps and their throughput-latency plot. Imports nothing heavy at
start-up; each function imports what it uses."""

from __future__ import annotations

import click

from costmodel.cli.options import (
    KvDtypeChoice,
    ListOf,
    ModelName,
    Positive,
    check_writable,
    choices,
    csv_to_stdout,
    echo_lines,
    emit,
    emit_json,
    emit_records,
    revision_option,
    sweep_spec,
    write_csv,
)
from costmodel.core.errors import CostModelError
from costmodel.core.files import wrote
from costmodel.core.vocab import DEFAULTS, DTYPES, MLA_FORMS, WEIGHT_DTYPES

#: What a whole-model sweep may vary.
MODEL_SWEEP_DIMS = ("batch", "context", "input_len", "output_len")


def load_layouts(
    model_name: str,
    variant: str | None,
    groups: int | None,
    kv_heads: int | None,
    variants: bool = False,
    routing: str | None = None,
) -> list:
    """The model (re-priced with ``--kv-heads`` or ``--variant``, its experts routed as ``--routing`` says), and
    with ``variants`` also its MHA, GQA, MQA and MLA versions."""
    from costmodel.model.presets import load_model

    model = load_model(model_name)
    if routing is not None:
        model = model.with_routing(routing)
    if kv_heads and (variant or groups):
        raise CostModelError("give --kv-heads or --variant/--groups, not both")
    if kv_heads:
        model = model.with_kv_heads(kv_heads)
    elif variant:
        model = model.with_variant(variant, groups)
    elif groups:
        raise CostModelError("--groups with --model needs --variant gqa")
    if variants:
        from costmodel.model.requests import with_variants

        return with_variants(model, latent=True)
    return [model]


def conventions(dtype, execution, tp, overlap, timing, without, weight_dtype, kv_dtype, mla_form) -> dict:
    """The pricing conventions of a whole-model command's options (:func:`costmodel.model.step.pricing`)."""
    return {
        "dtype": dtype,
        "execution": execution or DEFAULTS["model_execution"],
        "tp": tp,
        "overlap": overlap,
        "timing": timing,
        "without": without,
        "weight_dtype": weight_dtype,
        "kv_dtype": kv_dtype,
        "mla_form": mla_form,
    }


def model_records(p) -> list[dict]:
    """Every op of a model prediction's decode step and prefill, and the totals, as rows."""
    out = []
    for phase in ("decode", "prefill"):
        ph = getattr(p, phase)
        out += [
            {
                "device": p.hardware.id,
                "model": p.model.id,
                "phase": phase,
                "section": o.section,
                "op": o.name,
                "kernels": o.count,
                "flops": o.flops,
                "bytes": o.bytes,
                "time_s": o.time_s,
                "bound": o.bound,
            }
            for o in ph.ops
        ]
        if ph.all_reduce_s:
            out.append(
                {
                    "device": p.hardware.id,
                    "model": p.model.id,
                    "phase": phase,
                    "section": "tensor parallel",
                    "op": "all-reduce",
                    "kernels": ph.all_reduces,
                    "flops": 0.0,
                    "bytes": None,
                    "time_s": ph.all_reduce_s,
                    "bound": None,
                }
            )
        out.append(
            {
                "device": p.hardware.id,
                "model": p.model.id,
                "phase": phase,
                "section": "total",
                "op": "",
                "kernels": None,
                "flops": ph.flops,
                "bytes": ph.bytes,
                "time_s": ph.time_s,
                "bound": None,
            }
        )
    return out


def summary_record(p) -> dict:
    """One row per (device, model layout): TPOT, TTFT, throughput and memory."""
    mem = p.memory
    return {
        "device": p.hardware.id,
        "model": p.model.id,
        "attention": p.model.attention,
        "batch": p.workload.batch,
        "context": p.workload.context,
        "devices": p.hardware.devices,
        "tpot_s": p.total.tpot_s,
        "ttft_s": p.total.ttft_s,
        "tokens_per_s": p.total.tokens_per_s,
        "kv_cache_bytes_per_device": mem.kv_cache_bytes_per_device,
        "weight_bytes_per_device": mem.weight_bytes_per_device,
        "capacity_bytes": mem.capacity_bytes,
        "fits": mem.fits,
        "max_batch": mem.max_batch,
        "max_context": mem.max_context,
    }


def request_record(r) -> dict:
    return {
        "device": r.hardware.id,
        "model": r.model,
        "attention": r.attention,
        "batch": r.batch,
        "input_len": r.input_len,
        "output_len": r.output_len,
        "devices": r.tp,
        "ttft_s": r.ttft_s,
        "tpot_first_s": r.tpot_first_s,
        "tpot_last_s": r.tpot_last_s,
        "tpot_mean_s": r.tpot_mean_s,
        "e2e_s": r.e2e_s,
        "tokens_per_s_per_sequence": r.tokens_per_s_per_sequence,
        "tokens_per_s_per_device": r.tokens_per_s_per_device,
        "memory_bytes_per_device": r.kv_cache_bytes_per_device + r.weight_bytes_per_device,
        "capacity_bytes": r.capacity_bytes,
        "fits": r.fits,
    }


def predict_models(
    hws: list,
    layouts: list,
    fmt: str,
    *,
    batch,
    context,
    input_len,
    output_len,
    sweep_spec,
    csv_path,
    max_points,
    source,
    pricing: dict,
) -> None:
    """``costmodel predict --model``: one model (or its layouts) on one or more devices; a request with
    --input-len/--output-len; a whole-model sweep with --sweep."""
    from costmodel.render.models import devices_table, request_table

    if (input_len is None) != (output_len is None):
        raise CostModelError("--input-len and --output-len go together (a request: prompt and generated tokens)")
    if input_len is not None and context is not None:
        raise CostModelError("--context does not apply with --input-len/--output-len (the request sets the contexts)")
    if csv_path is not None and not sweep_spec:
        raise CostModelError("--csv needs --sweep DIM=RANGE")
    if sweep_spec:
        return sweep_models(
            hws,
            layouts,
            fmt,
            sweep_spec,
            csv_path=csv_path,
            max_points=max_points,
            batch=batch,
            context=context,
            input_len=input_len,
            output_len=output_len,
            pricing=pricing,
        )
    if input_len is not None:
        from costmodel.model.requests import request

        results = [
            request(m, hw, batch=batch or 1, input_len=input_len, output_len=output_len, **pricing)
            for hw in hws
            for m in layouts
        ]
        emit(
            fmt,
            [r.model_dump(mode="json") for r in results],
            [request_record(r) for r in results],
            lambda: request_table(results),
            single=len(results) == 1,
        )
        return
    from costmodel.model.step import predict_model

    given = {k: v for k, v in (("batch", batch), ("context", context)) if v is not None}
    results = [predict_model(m, hw, source=source, **given, **pricing) for hw in hws for m in layouts]
    if fmt in ("csv", "markdown"):
        records = (
            [r for p in results for r in model_records(p)]
            if len(results) == 1
            else [summary_record(p) for p in results]
        )
        emit_records(records, fmt)
    elif fmt == "json":
        dumped = [p.model_dump(mode="json") for p in results]
        emit_json(dumped[0] if len(dumped) == 1 else dumped)
    else:
        click.echo(str(results[0]) if len(results) == 1 else devices_table(results))


def sweep_models(
    hws: list,
    layouts: list,
    fmt: str,
    spec: str,
    *,
    csv_path,
    max_points,
    batch,
    context,
    input_len,
    output_len,
    pricing: dict,
    plot_path=None,
) -> list[dict]:
    """A whole-model sweep over batch, context, input or output length: one row per (device, layout, value)."""
    from costmodel.attention.sweeps import parse_range
    from costmodel.model.requests import model_sweep
    from costmodel.render.models import model_sweep_table

    name, text = sweep_spec(spec, MODEL_SWEEP_DIMS)
    if name in ("input_len", "output_len") and input_len is None:
        raise CostModelError(f"--sweep {name.replace('_', '-')} needs --input-len and --output-len")
    if name == "context" and input_len is not None:
        raise CostModelError("--sweep context does not apply to a request; sweep input-len or output-len")
    values = parse_range(text, max_points)
    if min(values) < 1:
        raise CostModelError(f"--sweep {name.replace('_', '-')} values must be at least 1")
    if csv_path is not None:
        check_writable(csv_path)
        fmt = csv_to_stdout(csv_path, fmt) if plot_path is None else fmt
    records = model_sweep(
        layouts, hws, name, values, batch=batch, context=context, input_len=input_len, output_len=output_len, **pricing
    )
    if csv_path is not None:
        write_csv(csv_path, records)
    if plot_path is None and fmt != "none":
        emit(fmt, records, records, lambda: model_sweep_table(records, name), single=False)
        if fmt == "table":
            echo_lines(wrote(csv_path))
    return records


def model_options(func):
    """The options of a whole-model prediction shared by predict, capacity and sweep."""
    options = [
        click.option(
            "--model",
            "model_name",
            type=ModelName(),
            help="preset id or alias (llama-3-8b, ...), a Hub id (ORG/NAME[@REVISION]), a config.json or a folder",
        ),
        revision_option,
        click.option(
            "--tp",
            "--tensor-parallel-size",
            "-tp",
            "tp",
            type=ListOf(Positive),
            default=DEFAULTS["tp"],
            show_default=True,
            help="with --model: tensor-parallel devices; served, a comma list (2,4) compares them on one curve",
        ),
        click.option("--kv-heads", type=Positive, help="with --model: re-price it with this many key/value heads"),
        click.option(
            "--weight-dtype",
            type=ListOf(choices(WEIGHT_DTYPES)),
            help="with --model: projection weights' storage (int4: groups of 128 with 16-bit scales); served, a "
            "comma list (bf16,fp8) compares them [default: the config's quantization, else --dtype]",
        ),
        click.option(
            "--kv-dtype",
            "--kv-cache-dtype",
            "kv_dtype",
            type=ListOf(KvDtypeChoice(DTYPES)),
            help="with --model: the KV cache's dtype (fp8, fp8_e4m3, bf16, ...; auto: the default); served, a comma "
            "list (auto,fp8) compares them [default: --dtype, or the engine's for the checkpoint]",
        ),
        click.option(
            "--mla-form",
            type=choices(MLA_FORMS),
            help="with an MLA --model: one form for decode and prefill [default: absorbed decode, naive prefill]",
        ),
        click.option(
            "--input-len",
            "--random-input-len",
            "input_len",
            type=Positive,
            help="with --model: prompt tokens of a request",
        ),
        click.option(
            "--output-len",
            "--random-output-len",
            "output_len",
            type=Positive,
            help="with --model: generated tokens of a request",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def plot_model_sweep(
    hws, layouts, spec, outs, csv_path, max_points, batch, context, input_len, output_len, pricing
) -> None:
    """``costmodel sweep --model``: throughput against latency, one curve per (device, layout)."""
    from costmodel.render.plots import save
    from costmodel.render.serving_plots import draw_throughput_latency

    records = sweep_models(
        hws,
        layouts,
        "table",
        spec,
        csv_path=csv_path,
        max_points=max_points,
        batch=batch,
        context=context,
        input_len=input_len,
        output_len=output_len,
        pricing=pricing,
        plot_path=outs[0],
    )
    fig = draw_throughput_latency(records, sweep_spec(spec, MODEL_SWEEP_DIMS)[0])
    for path in outs:  # one figure, saved to each file
        save(fig, path, data=records)
    echo_lines(wrote(*outs, csv_path))


__all__ = ["conventions", "predict_models", "plot_model_sweep", "model_options", "load_layouts"]
