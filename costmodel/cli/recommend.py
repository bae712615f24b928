"""``costmodel recommend``: the fewest GPUs, and the layout, that serve a load under latency targets, with the
engine's launch command."""

from __future__ import annotations

import click

from costmodel.cli.click_types import EngineChoice, OnceCommand, PositiveNumber, Price
from costmodel.cli.load import requests_of
from costmodel.cli.load_options import (
    ENGINE_FLAG_KEYS,
    REQUEST_KEYS,
    engine_flag_options,
    flag_arguments,
    request_arguments,
    request_options,
)
from costmodel.cli.options import (
    KvDtypeChoice,
    Positive,
    choices,
    emit,
    format_option,
    gpus_option,
    json_option,
    model_option,
    output_format,
    time_limit_option,
)
from costmodel.core.errors import CostModelError
from costmodel.core.vocab import DEFAULTS, DTYPES, OBJECTIVES, WEIGHT_DTYPES


@click.command("recommend", cls=OnceCommand)
@gpus_option
@model_option
@click.option("--input-len", type=Positive, required=True, help="prompt tokens of a request")
@click.option("--output-len", type=Positive, required=True, help="generated tokens of a request")
@click.option("--request-rate", type=PositiveNumber(), help="the load: requests per second arriving (Poisson)")
@click.option("--concurrency", type=Positive, help="the load: clients in a closed loop")
@click.option("--ttft-ms", type=PositiveNumber(), help="target time to first token, milliseconds")
@click.option("--tpot-ms", type=PositiveNumber(), help="target time per output token, milliseconds")
@click.option(
    "--statistic",
    type=choices(("mean", "p90")),
    default="mean",
    show_default=True,
    help="the targets hold for the mean (closed form) or the p90 (simulated) of TTFT and TPOT",
)
@click.option(
    "--price-per-hour",
    type=Price(),
    multiple=True,
    help="price of one GPU-hour, for every --gpu (2.5) or for one (h100=2.5, repeated): the cost per hour",
)
@click.option(
    "--minimise",
    "--minimize",
    "minimise",
    type=choices(OBJECTIVES),
    default="gpus",
    show_default=True,
    help="what the answer minimises under the targets: GPUs, cost per hour (needs --price-per-hour) or joules per "
    "output token",
)
@click.option("--max-gpus", type=Positive, default=64, show_default=True, help="the most GPUs of one kind searched")
@click.option("--num-requests", type=Positive, help="requests per simulated point [default: 1,000 a rate]")
@click.option(
    "--engine",
    "engine_name",
    type=EngineChoice(),
    default=DEFAULTS["engine"],
    show_default=True,
    help="the serving engine",
)
@click.option("--weight-dtype", type=choices(WEIGHT_DTYPES), help="the weights' storage [default: the checkpoint's]")
@click.option(
    "--kv-dtype",
    "--kv-cache-dtype",
    "kv_dtype",
    type=KvDtypeChoice(DTYPES),
    help="the KV cache's dtype (auto: the default) [default: the engine's for the checkpoint]",
)
@engine_flag_options
@request_options()
@time_limit_option
@format_option
@json_option
def recommend(**options) -> None:
    """The fewest GPUs that serve a load under TTFT and TPOT targets, the layout, and how to launch it.

    Searches every --gpu kind's engine units (tensor parallel over 1-8 GPUs; for a mixture of experts expert
    parallel and attention data parallel; pipeline stages past one node) for the most one unit serves under the
    targets, adds replicas for the load, and prices the answer again as a whole. With --minimise energy the answer
    is the layout that spends the fewest joules per output token, with --minimise cost the cheapest per hour at
    each device's --price-per-hour; both still meet the targets. Prints the answer, the `costmodel
    predict` arguments that reprice it, the engine's launch command (vllm serve, sglang.launch_server,
    trtllm-serve), the `vllm bench serve` command that would measure it, and every candidate.

    Example: costmodel recommend --model llama-3.1-70b --gpu h100 --gpu h200 --input-len 2048 --output-len 512
    --request-rate 10 --ttft-ms 2000 --tpot-ms 50
    """
    from costmodel.deploy.recommend import recommend as run
    from costmodel.engine.config import EngineFlags
    from costmodel.hardware.catalog import load_profile
    from costmodel.model.presets import load_model

    o = options
    fmt = output_format(o.pop("fmt"), o.pop("as_json"))
    if (o["request_rate"] is None) == (o["concurrency"] is None):
        raise CostModelError("give the load to serve: --request-rate R or --concurrency C, one of them")
    if o["ttft_ms"] is None and o["tpot_ms"] is None:
        raise CostModelError("recommend needs a target: --ttft-ms, --tpot-ms or both")
    settings = {k: o.pop(k) for k in EngineFlags.__dataclass_fields__ if k in o}
    m = load_model(o["model_name"])
    rec = run(
        m,
        [load_profile(g) for g in o["gpus"]],
        requests_of(o, o["input_len"], o["output_len"]).with_(
            concurrency=o["concurrency"], request_rate=o["request_rate"]
        ),
        engine_name=o["engine_name"],
        flags=EngineFlags(**settings),
        ttft_s=o["ttft_ms"] / 1e3 if o["ttft_ms"] is not None else None,
        tpot_s=o["tpot_ms"] / 1e3 if o["tpot_ms"] is not None else None,
        statistic=o["statistic"],
        price_per_gpu_hour=prices(o["price_per_hour"]),
        minimise=o["minimise"],
        max_gpus=o["max_gpus"],
        weight_dtype=o["weight_dtype"],
        kv_dtype=o["kv_dtype"],
        time_limit=o["time_limit"],
        frontend=o["frontend"],
    )
    rec = rec.model_copy(update={"command": _command(rec, m, o, settings)})
    dumped = rec.model_dump(mode="json")
    emit(fmt, [dumped], [c.model_dump(mode="json") for c in rec.candidates], lambda: str(rec), single=True)


#: recommend's options by what they ask, as its --help lists them.
recommend.panels = {
    **dict.fromkeys(("gpus", "fmt", "as_json"), "Devices and output"),
    **dict.fromkeys(
        ("model_name", "revision", "input_len", "output_len", "weight_dtype", "kv_dtype"), "The model and its requests"
    ),
    **dict.fromkeys(("request_rate", "concurrency", "num_requests", *REQUEST_KEYS), "The load"),
    **dict.fromkeys(
        ("ttft_ms", "tpot_ms", "statistic", "minimise", "price_per_hour", "max_gpus", "time_limit"),
        "Targets and search",
    ),
    **dict.fromkeys(("engine_name", *ENGINE_FLAG_KEYS), "The engine and its flags"),
}


def prices(given: tuple) -> float | dict[str, float] | None:
    """recommend's price per GPU-hour from its --price-per-hour values: one number for every device kind, or
    device=price pairs (each device resolved to its profile id; one that no --gpu names is refused by
    :func:`costmodel.deploy.objectives.checked_prices`)."""
    from costmodel.hardware.catalog import load_profile

    if not given:
        return None
    plain = [p for d, p in given if d is None]
    if plain and len(given) > 1:
        raise CostModelError(
            "--price-per-hour is one price for every --gpu (2.5) or one per device (h100=2.5 a100=1.3), not both"
        )
    return plain[0] if plain else {load_profile(device).id: price for device, price in given}


def _command(rec, m, o: dict, settings: dict) -> list[str]:
    """The ``costmodel predict`` arguments that price the answer ``rec`` again (``o``: recommend's options,
    ``settings``: its engine flags)."""
    from costmodel.deploy.launch import hub_id

    command = ["predict", "--gpu", rec.gpu, "--model", hub_id(m), "--engine", rec.engine]
    command += ["--revision", m.revision] if m.revision else []
    command += ["--input-len", str(rec.input_len), "--output-len", str(rec.output_len), "--evaluator", rec.evaluator]
    command += (
        ["--concurrency", str(rec.concurrency)] if rec.concurrency else ["--request-rate", f"{rec.request_rate:g}"]
    )
    if o["num_requests"]:
        command += ["--num-requests", str(o["num_requests"])]
    if rec.mode == "disagg":
        command.append("--disaggregated")
        for role in ("prefill", "decode"):
            tp = getattr(rec, f"{role}_tp")
            command += [f"--{role}-tp", str(tp), f"--{role}-workers", str(getattr(rec, f"{role}_workers"))]
            command += [f"--{role}-expert-parallel"] if rec.expert_parallel and tp > 1 else []
            if settings.get("max_num_seqs") is not None:
                command += [f"--{role}-max-num-seqs", str(settings["max_num_seqs"])]
        settings = {k: v for k, v in settings.items() if k != "max_num_seqs"}
    else:
        command += ["--tp", str(rec.tp)]
        for flag, value, default in (
            ("--replicas", rec.replicas, 1),
            ("--attention-dp", rec.attention_dp, 1),
            ("--pipeline-parallel-size", rec.pipeline_parallel, 1),
        ):
            command += [flag, str(value)] if value != default else []
        command += ["--expert-parallel"] if rec.expert_parallel else []
    if rec.price_per_gpu_hour is not None:
        command += ["--price-per-gpu-hour", f"{rec.price_per_gpu_hour:g}"]
    if rec.max_num_batched_tokens is not None:
        settings = settings | {"max_num_batched_tokens": rec.max_num_batched_tokens}
    command += flag_arguments(settings) + request_arguments(o)
    for flag, value in (("--weight-dtype", o["weight_dtype"]), ("--kv-dtype", o["kv_dtype"])):
        command += [flag, value] if value else []
    return command
