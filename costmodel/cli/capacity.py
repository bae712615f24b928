"""`costmodel capacity`: the most a model serves under latency targets, per device and attention variant, with a batch or under an engine's load."""

from __future__ import annotations

from types import SimpleNamespace

import click

from costmodel.cli.click_types import EngineChoice, OnceCommand, PositiveNumber
from costmodel.cli.html import html_option
from costmodel.cli.load import requests_of
from costmodel.cli.load_options import (
    CACHE_KEYS,
    ENGINE_FLAG_KEYS,
    REQUEST_KEYS,
    engine_flag_options,
    request_arguments,
    request_options,
)
from costmodel.cli.options import (
    Positive,
    choices,
    dtype_option,
    emit,
    format_option,
    gpus_option,
    json_option,
    output_format,
    time_limit_option,
    timing_option,
    variant_option,
    without_option,
)
from costmodel.cli.serving import conventions, load_layouts, model_options
from costmodel.core.errors import CostModelError
from costmodel.core.vocab import DEFAULTS, DERIVE_VARIANTS, EXECUTIONS


@click.command("capacity", cls=OnceCommand)
@gpus_option
@model_options
@variant_option(DERIVE_VARIANTS, "re-price the model with this attention layout")
@click.option("--groups", "-g", type=Positive, help="key/value heads of --variant gqa")
@click.option("--tpot-ms", type=PositiveNumber(), help="target mean time per output token, milliseconds")
@click.option("--ttft-ms", type=PositiveNumber(), help="target time to first token, milliseconds")
@click.option(
    "--price-per-hour", type=PositiveNumber(), help="price of one device-hour: adds the cost per million output tokens"
)
@click.option(
    "--variants/--no-variants",
    default=True,
    show_default=True,
    help="also the model's MHA, GQA and MQA versions, side by side",
)
@dtype_option
@click.option(
    "--execution",
    type=choices(EXECUTIONS),
    default=DEFAULTS["model_execution"],
    show_default=True,
    help="unfused or flash-style fused attention",
)
@timing_option
@without_option
@click.option(
    "--batching",
    type=choices(("continuous", "static")),
    default="continuous",
    show_default=True,
    help="continuous: the most clients an engine serves under load; static: the largest batch of "
    "requests prefilled together, then decoded",
)
@click.option(
    "--engine",
    "engine_name",
    type=EngineChoice(),
    default=DEFAULTS["engine"],
    show_default=True,
    help="with --batching continuous: the serving engine",
)
@click.option(
    "--load",
    "load",
    type=choices(("concurrency", "request-rate")),
    default="concurrency",
    show_default=True,
    help="with --batching continuous: search the most closed-loop clients, or the highest Poisson arrival rate",
)
@click.option(
    "--statistic",
    type=choices(("mean", "p90")),
    default="mean",
    show_default=True,
    help="with --batching continuous: hold the mean or the p90 of TTFT and TPOT to the targets",
)
@click.option(
    "--evaluator",
    type=choices(("simulation", "steady-state")),
    help="with --batching continuous: how each concurrency is priced [default: the closed form for "
    "means, the simulation for p90]",
)
@engine_flag_options
@request_options("num_requests", *CACHE_KEYS)
@time_limit_option
@format_option
@json_option
@html_option()
def capacity(**options) -> None:
    """The most a model serves under latency targets, per device and attention layout.

    For requests of --input-len prompt and --output-len generated tokens: with continuous batching (the
    default) the most clients an engine serves while TTFT and TPOT (mean or p90) stay under --ttft-ms and
    --tpot-ms (--load request-rate: the highest Poisson arrival rate); with --batching static the largest batch
    whose mean TPOT and TTFT stay under the targets and whose weights and KV cache fit. Which limit binds, the
    throughput there, and with --price-per-hour the cost per million output tokens.

    Example: costmodel capacity --gpu h100 --model llama-3-8b --input-len 2048 --output-len 512 --tpot-ms 50
    """
    from costmodel.engine.config import EngineFlags

    flags = EngineFlags(**{k: options.pop(k) for k in EngineFlags.__dataclass_fields__ if k in options})
    o = SimpleNamespace(**options)
    from costmodel.hardware.catalog import load_profile
    from costmodel.model.requests import capacity as run_capacity
    from costmodel.render.models import capacity_table

    o.fmt = output_format(o.fmt, o.as_json)
    if not o.model_name:
        raise CostModelError("capacity needs --model (a preset, a config.json or a folder)")
    if o.input_len is None or o.output_len is None:
        raise CostModelError("capacity needs --input-len and --output-len (the requests it serves)")
    hws = [load_profile(g) for g in o.gpus]
    layouts = load_layouts(o.model_name, o.variant, o.groups, o.kv_heads)
    if o.batching != "continuous" and flags.settings():
        raise CostModelError("engine flags (--max-num-seqs, ...) apply with --batching continuous (an engine)")
    if o.batching == "continuous":
        return _load_capacity(
            hws,
            layouts[0],
            o.fmt,
            input_len=o.input_len,
            output_len=o.output_len,
            tpot_ms=o.tpot_ms,
            ttft_ms=o.ttft_ms,
            price_per_hour=o.price_per_hour,
            variants=o.variants,
            engine_name=o.engine_name,
            statistic=o.statistic,
            evaluator=o.evaluator,
            tp=o.tp,
            weight_dtype=o.weight_dtype,
            kv_dtype=o.kv_dtype,
            timing=o.timing,
            flags=flags,
            load=o.load,
            time_limit=o.time_limit,
            requests=requests_of(vars(o), o.input_len, o.output_len),
            frontend=o.frontend,
        )
    if request_arguments(vars(o)) or o.num_requests is not None:
        raise CostModelError("the requests' lengths, count and front end apply with --batching continuous")
    if o.statistic != "mean" or o.evaluator is not None or o.load != "concurrency":
        raise CostModelError("--statistic, --evaluator and --load apply with --batching continuous")
    report = run_capacity(
        layouts[0],
        hws,
        input_len=o.input_len,
        output_len=o.output_len,
        tpot_s=o.tpot_ms / 1e3 if o.tpot_ms is not None else None,
        ttft_s=o.ttft_ms / 1e3 if o.ttft_ms is not None else None,
        price_per_hour=o.price_per_hour,
        variants=o.variants,
        **conventions(
            o.dtype, o.execution, o.tp, DEFAULTS["overlap"], o.timing, o.without, o.weight_dtype, o.kv_dtype, o.mla_form
        ),
    )
    records = [_static_record(p) for p in report.points]
    emit(o.fmt, [report.model_dump(mode="json")], records, lambda: capacity_table(report), single=True)


def _static_record(p) -> dict:
    """One point of a static-batching capacity as a CSV row."""
    return {
        "device": p.device,
        "model": p.model,
        "attention": p.attention,
        "batch": p.batch,
        "binds": p.binds,
        "memory_batch": p.memory_batch,
        "ttft_s": p.request.ttft_s if p.request else None,
        "tpot_mean_s": p.request.tpot_mean_s if p.request else None,
        "tokens_per_s_per_device": p.request.tokens_per_s_per_device if p.request else None,
        "cost_per_million_tokens": p.cost_per_million_tokens,
    }


def _load_capacity(
    hws,
    m,
    fmt,
    *,
    input_len,
    output_len,
    tpot_ms,
    ttft_ms,
    price_per_hour,
    variants,
    engine_name,
    statistic,
    evaluator,
    tp,
    weight_dtype,
    kv_dtype,
    timing,
    load,
    flags,
    time_limit,
    requests,
    frontend,
) -> None:
    from costmodel.deploy.capacity import load_capacity
    from costmodel.engine.layout import Layout
    from costmodel.render.serving import load_capacity_table

    if tpot_ms is None and ttft_ms is None:
        raise CostModelError("capacity under load needs a target: --tpot-ms, --ttft-ms or both")
    report = load_capacity(
        m,
        hws,
        requests,
        engine_name=engine_name,
        tpot_s=tpot_ms / 1e3 if tpot_ms is not None else None,
        ttft_s=ttft_ms / 1e3 if ttft_ms is not None else None,
        statistic=statistic,
        evaluator=evaluator,
        price_per_hour=price_per_hour,
        variants=variants,
        layout=Layout(tp=tp),
        flags=flags,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        timing=timing,
        load=load,
        time_limit=time_limit,
        frontend=frontend,
    )
    records = [
        {
            "device": p.device,
            "model": p.model,
            "attention": p.attention,
            "concurrency": p.concurrency,
            "request_rate": p.request_rate,
            "binds": p.binds,
            "ttft_s": p.at.ttft_s if p.at else None,
            "tpot_s": p.at.tpot_s if p.at else None,
            "output_tokens_per_s_per_device": p.at.output_tokens_per_s_per_device if p.at else None,
            "cost_per_million_tokens": p.cost_per_million_tokens,
        }
        for p in report.points
    ]
    emit(fmt, [report.model_dump(mode="json")], records, lambda: load_capacity_table(report), single=True)


#: capacity's options by what they ask, as its --help lists them.
capacity.panels = {
    **dict.fromkeys(("gpus", "fmt", "as_json", "html_path"), "Devices and output"),
    **dict.fromkeys(
        (
            "model_name",
            "revision",
            "tp",
            "kv_heads",
            "weight_dtype",
            "kv_dtype",
            "mla_form",
            "input_len",
            "output_len",
            "variant",
            "groups",
            "variants",
        ),
        "The model and its requests",
    ),
    **dict.fromkeys(("tpot_ms", "ttft_ms", "statistic", "load", "price_per_hour", "time_limit"), "Targets and cost"),
    **dict.fromkeys(("num_requests", *REQUEST_KEYS, *CACHE_KEYS), "The requests (with --batching continuous)"),
    **dict.fromkeys(("batching", "engine_name", "evaluator"), "How it is served"),
    **dict.fromkeys(ENGINE_FLAG_KEYS, "Engine flags (each engine's own default where not set)"),
    **dict.fromkeys(("dtype", "execution", "timing", "without"), "The kernels' time model"),
}
