"""``costmodel plan``: every layout of a model on N devices, priced under load, and the front of throughput per
device against throughput per user."""

from __future__ import annotations

import click

from costmodel.cli.click_types import EngineChoice, OnceCommand, PositiveNumber
from costmodel.cli.html import html_option
from costmodel.cli.load import requests_of
from costmodel.cli.load_options import (
    CACHE_KEYS,
    REQUEST_KEYS,
    engine_flag_options,
    flag_arguments,
    request_arguments,
    request_options,
)
from costmodel.cli.options import (
    FilePath,
    KvDtypeChoice,
    Positive,
    choices,
    emit,
    format_option,
    gpus_option,
    json_option,
    model_option,
    output_format,
    routing_option,
    time_limit_option,
)
from costmodel.core.vocab import DEFAULTS, DTYPES, WEIGHT_DTYPES


@click.command("plan", cls=OnceCommand)
@gpus_option
@model_option
@click.option("--gpus", "devices", type=Positive, required=True, help="devices of each --gpu kind to place it on")
@click.option("--input-len", type=Positive, required=True, help="prompt tokens of a request")
@click.option("--output-len", type=Positive, required=True, help="generated tokens of a request")
@click.option("--ttft-ms", type=PositiveNumber(), help="target mean time to first token, milliseconds")
@click.option("--tpot-ms", type=PositiveNumber(), help="target mean time per output token, milliseconds")
@click.option(
    "--engine",
    "engine_name",
    type=EngineChoice(),
    default=DEFAULTS["engine"],
    show_default=True,
    help="the serving engine of every worker",
)
@click.option("--weight-dtype", type=choices(WEIGHT_DTYPES), help="the weights' storage [default: the checkpoint's]")
@click.option(
    "--kv-dtype",
    "--kv-cache-dtype",
    "kv_dtype",
    type=KvDtypeChoice(DTYPES),
    help="the KV cache's dtype (auto: the default) [default: the engine's for the checkpoint]",
)
@click.option(
    "--max-concurrency",
    type=Positive,
    default=256,
    show_default=True,
    help="the most clients per replica (per deployment, disaggregated) a layout is loaded with",
)
@click.option("--plot", "plot_path", type=FilePath(), help="write the front as a figure (.png, .svg, .pdf, .html)")
@engine_flag_options
@request_options("num_requests", *CACHE_KEYS)
@routing_option
@time_limit_option
@format_option
@json_option
@html_option(silent=("plot_path",))
def plan(
    gpus,
    model_name,
    devices,
    input_len,
    output_len,
    ttft_ms,
    tpot_ms,
    engine_name,
    weight_dtype,
    kv_dtype,
    max_concurrency,
    plot_path,
    routing,
    time_limit,
    fmt,
    as_json,
    **engine_flags,
) -> None:
    """Every way to serve a model on --gpus devices, and the best under latency targets.

    Enumerates aggregated layouts (tensor parallel, replicas, pipeline stages; expert parallel and attention data
    parallel for a mixture of experts) and disaggregated ones (prefill and decode pools), loads each with clients
    until its throughput stops growing,
    and prints the Pareto front of output tokens/s per device against tokens/s per user, the layout of each
    point, and the layout with the most tokens/s per device whose mean TTFT and TPOT meet --ttft-ms and
    --tpot-ms. Several --gpu give one front per device.

    Example: costmodel plan --model llama-3.1-70b --gpu h100 --gpus 8 --input-len 2048 --output-len 512 --tpot-ms 50
    """
    from costmodel.deploy.planner import plan as run_plan
    from costmodel.engine.config import EngineFlags
    from costmodel.hardware.catalog import load_profile
    from costmodel.model.presets import load_model
    from costmodel.render.plots import check_output

    fmt = output_format(fmt, as_json)
    asked = {k: engine_flags.pop(k) for k in ("num_requests", *REQUEST_KEYS, *CACHE_KEYS)}
    settings = engine_flags
    if plot_path is not None:
        check_output(plot_path)
    m = load_model(model_name)
    if routing is not None:
        m = m.with_routing(routing)
    hws = [load_profile(g) for g in gpus]
    result = run_plan(
        m,
        hws,
        devices=devices,
        input_len=input_len,
        output_len=output_len,
        engine_name=engine_name,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        max_concurrency=max_concurrency,
        ttft_s=ttft_ms / 1e3 if ttft_ms is not None else None,
        tpot_s=tpot_ms / 1e3 if tpot_ms is not None else None,
        flags=EngineFlags(**settings),
        time_limit=time_limit,
        requests=requests_of(asked, input_len, output_len),
        frontend=asked["frontend"],
    )
    given = dict(
        model=model_name,
        input_len=input_len,
        output_len=output_len,
        engine=engine_name,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        routing=routing,
    )
    dumped = result.model_dump(mode="json")
    _commands(dumped, m, given, flag_arguments(settings) + request_arguments(asked), asked["num_requests"])
    _draw(dumped, plot_path)
    emit(fmt, [dumped], dumped["front"], lambda: str(result), single=True)
    if plot_path is not None and fmt == "table":
        from costmodel.core.files import wrote

        for line in wrote(plot_path):
            click.echo(line)


def _commands(dumped: dict, m, given: dict, flag_args: list, num_requests) -> None:
    """Each front and best point's ``costmodel predict`` arguments (with the engine flags and the requests' options
    given) and its model step's."""
    flag_args = flag_args + (["--num-requests", str(num_requests)] if num_requests else [])
    for point in dumped["front"] + dumped["best"]:
        point["command"] = point_command(point, **given) + pooled(flag_args, point["mode"])
        point["step_command"] = step_command(point, m, **given)


def _draw(dumped: dict, plot_path) -> None:
    """The plan's front as a figure, where --plot asks for one."""
    if plot_path is not None:
        from costmodel.render.plan_figure import draw_plan
        from costmodel.render.plots import save

        save(draw_plan(dumped), plot_path, data=dumped)


def point_command(
    point: dict, *, model: str, input_len: int, output_len: int, engine: str, weight_dtype, kv_dtype, routing
) -> list[str]:
    """The ``costmodel predict`` arguments that price one of a plan's points alone: its layout on its device under
    its clients (every replica's, with ``--replicas``), the same numbers as the plan's."""
    cmd = [
        "predict",
        "--gpu",
        point["device"],
        "--model",
        model,
        "--engine",
        engine,
        "--concurrency",
        str(point["concurrency"]),
        "--input-len",
        str(input_len),
        "--output-len",
        str(output_len),
    ]
    if point["mode"] == "agg":
        cmd += ["--tp", str(point["tp"])]
        cmd += ["--replicas", str(point["replicas"])] if point["replicas"] > 1 else []
        cmd += ["--expert-parallel"] if point["expert_parallel"] else []
        cmd += ["--attention-dp", str(point["attention_dp"])] if point["attention_dp"] > 1 else []
        cmd += ["--pipeline-parallel-size", str(point["pipeline_parallel"])] if point["pipeline_parallel"] > 1 else []
    else:
        cmd += [
            "--disaggregated",
            "--prefill-tp",
            str(point["prefill_tp"]),
            "--prefill-workers",
            str(point["prefill_workers"]),
            "--decode-tp",
            str(point["decode_tp"]),
            "--decode-workers",
            str(point["decode_workers"]),
        ]
        cmd += ["--prefill-expert-parallel"] if point["expert_parallel"] and point["prefill_tp"] > 1 else []
        cmd += ["--decode-expert-parallel"] if point["expert_parallel"] else []
        cmd += ["--decode-attention-dp", str(point["decode_attention_dp"])] if point["decode_attention_dp"] > 1 else []
    return cmd + _given_flags(weight_dtype, kv_dtype, routing)


def _given_flags(weight_dtype, kv_dtype, routing) -> list[str]:
    """The precision and routing flags of a point's commands, those given."""
    return [
        part
        for flag, value in (("--weight-dtype", weight_dtype), ("--kv-dtype", kv_dtype), ("--routing", routing))
        if value is not None
        for part in (flag, value)
    ]


def step_command(
    point: dict, m, *, model: str, input_len: int, output_len: int, engine: str, weight_dtype, kv_dtype, routing
) -> list[str] | None:
    """The ``costmodel predict`` arguments of one decode step of a point's decoding engine (an aggregated replica, or
    a disaggregated decode worker): each of its tensor-parallel groups' share of the clients (its attention data
    parallel groups' each) decoding at the mean context (prompt + half the output), its experts spread over its
    devices where the point's are (expert parallel), the cache in the engine's dtype; its ops, what binds each and
    the assumptions. None for pipeline stages, whose iteration runs several micro-batches."""
    from costmodel.engine.served import checkpoint_kv_dtype

    if point["pipeline_parallel"] > 1:
        return None
    agg = point["mode"] == "agg"
    tp, engines, dp = (
        (point["tp"], point["replicas"], point["attention_dp"])
        if agg
        else (point["decode_tp"], point["decode_workers"], point["decode_attention_dp"])
    )
    cmd = [
        "predict",
        "--gpu",
        point["device"],
        "--model",
        model,
        "--tp",
        str(tp),
        "--batch",
        str(max(point["concurrency"] // (engines * dp), 1)),
        "--context",
        str(input_len + output_len // 2),
    ]
    cmd += ["--expert-parallel"] if point["expert_parallel"] else []
    cmd += ["--attention-dp", str(dp)] if dp > 1 else []
    return cmd + _given_flags(weight_dtype, kv_dtype or checkpoint_kv_dtype(m, engine, weight_dtype), routing)


__all__ = ["plan", "point_command", "step_command"]


def pooled(args: list[str], mode: str) -> list[str]:
    """A plan's engine flags for one point's command: a disaggregated point's sequence limit on each pool."""
    if mode == "agg" or "--max-num-seqs" not in args:
        return args
    i = args.index("--max-num-seqs")
    n = args[i + 1]
    return [*args[:i], *args[i + 2 :], "--prefill-max-num-seqs", n, "--decode-max-num-seqs", n]
