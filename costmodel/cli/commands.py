"""The ``costmodel`` command line: each command parses its options, calls the library and prints.

Nothing heavy is imported at start-up (``costmodel --help`` loads neither sympy nor numpy); every
command imports what it uses.
"""

from __future__ import annotations

from types import SimpleNamespace

import click

from costmodel import __version__
from costmodel.cli import explain as cli_explain
from costmodel.cli import figures as cli_figures
from costmodel.cli import web as cli_web
from costmodel.cli.attention import attention_predict, attention_sweep
from costmodel.cli.capacity import capacity
from costmodel.cli.catalog import hardware, models
from costmodel.cli.click_types import ErrorLineGroup
from costmodel.cli.derive import derive
from costmodel.cli.html import html_option
from costmodel.cli.load import LOAD_KEYS, predict_load, step_layout, wants_load
from costmodel.cli.load_options import engine_options
from costmodel.cli.options import (
    CONTEXT,
    FilePath,
    Positive,
    choices,
    format_option,
    given,
    gpus_option,
    groups_option,
    max_points_option,
    output_format,
    routing_option,
    variant_option,
    workload_options,
)
from costmodel.cli.plan import plan as plan_command
from costmodel.cli.recommend import recommend
from costmodel.cli.reproduce import reproduce
from costmodel.cli.serving import model_options
from costmodel.core.errors import CostModelError
from costmodel.core.vocab import DEFAULTS, DERIVE_VARIANTS, ENGINE_NAMES, GEMM_DTYPES, PROMPT_WRITES, SWEEP_DIMS


@click.group(cls=ErrorLineGroup, context_settings=CONTEXT)
@click.version_option(version=__version__, package_name="costmodel-llm")
@click.option("--quiet", "-q", is_flag=True, help="no progress bars (they show only on a terminal, on stderr)")
def main(quiet: bool) -> None:
    """Exact FLOP and memory costs of MHA, GQA and MQA attention, and what they cost on an accelerator."""
    from costmodel.core import progress

    progress.QUIET = quiet


#: predict's own parameters; the other options are the workload's dimensions (--batch, --context, ...).
PREDICT_PARAMS = (
    "gpus",
    "variant",
    "groups",
    "mode",
    "dtype",
    "layers",
    "execution",
    "overlap",
    "cache_append",
    "timing",
    "without",
    "prompt_write",
    "kernels",
    "gemm_spec",
    "gemm_dtype",
    "sweep_spec",
    "csv_path",
    "max_points",
    "model_name",
    "tp",
    "kv_heads",
    "weight_dtype",
    "kv_dtype",
    "mla_form",
    "input_len",
    "output_len",
    "model_config",
    "source",
    "variants",
    "routing",
    "fmt",
    "as_json",
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
    "--prompt-write",
    type=choices(PROMPT_WRITES),
    help="whether the timed prompt call also writes the prompt's keys and values into the cache: in-call (vLLM "
    "before 0.16, SGLang, TensorRT-LLM) or apart (vLLM 0.16 on) [default: as the device's fit says]",
)
@click.option("--gemm", "gemm_spec", metavar="M,N,K", help="one GEMM of M x K by K x N instead of attention")
@click.option(
    "--gemm-dtype",
    type=choices(GEMM_DTYPES),
    default="bf16",
    show_default=True,
    help="with --gemm: its format (fp8 per tensor, fp8 block-scaled, NVFP4)",
)
@click.option(
    "--kernels",
    type=choices(ENGINE_NAMES),
    help="whose kernels price one attention layer: a serving engine's own classes where its kernels were timed "
    "(sglang, trtllm) [default: the device's, vLLM's]",
)
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
def predict(**options) -> None:
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

    load = {k: options.pop(k) for k in LOAD_KEYS}
    o = SimpleNamespace(**{k: options.pop(k) for k in PREDICT_PARAMS})
    dims = options  # the workload's dimensions (--batch, --context, --heads, ...)
    fmt = output_format(o.fmt, o.as_json)
    hws = [load_profile(g) for g in o.gpus]
    if o.model_name and o.model_config:
        raise CostModelError("give --model or --model-config, not both")
    if o.model_name or o.model_config:
        layer_only = [
            f for f, v in (("--kernels", o.kernels), ("--prompt-write", o.prompt_write), ("--gemm", o.gemm_spec)) if v
        ]
        if layer_only or o.gemm_dtype != "bf16":
            raise CostModelError(
                f"{(layer_only or ['--gemm-dtype'])[0]} applies to one attention layer or one GEMM, not with --model "
                "(there --engine picks whose kernels run)"
            )
        _predict_models(hws, fmt, load, dims, o)
        return
    if wants_load(load):
        raise CostModelError("--engine, --concurrency and --request-rate apply with --model")
    if o.gemm_spec:
        from costmodel.cli.gemm import predict_gemms

        if o.variant or o.sweep_spec or o.prompt_write or given(dims):
            raise CostModelError("--gemm prices one GEMM: give no attention workload (--variant, --sweep, dimensions)")
        predict_gemms(hws, fmt, o.gemm_spec, o.gemm_dtype, o.timing, o.without, o.kernels)
        return
    if o.gemm_dtype != "bf16":
        raise CostModelError("--gemm-dtype applies with --gemm M,N,K")
    _predict_attention(hws, fmt, dims, o)


def _predict_models(hws, fmt, load: dict, dims: dict, o) -> None:
    """predict --model: a model's step or request, or served under load (``o``: predict's parameters)."""
    extra = {k: v for k, v in dims.items() if v is not None and k not in ("batch", "context")}
    extra |= {"layers": o.layers} if o.layers != 1 else {}
    extra |= {"mode": o.mode} if o.mode.lower() != "incremental" else {}
    if extra:
        flag = "--" + next(iter(extra)).replace("_", "-")
        raise CostModelError(
            f"{flag} does not apply with --model (the model sets its shape; "
            "--batch, --context, --source, --dtype, --execution, --tp and --variant/--groups do)"
        )
    from costmodel.cli.serving import conventions, load_layouts, predict_models

    layouts = load_layouts(o.model_config or o.model_name, o.variant, o.groups, o.kv_heads, o.variants, o.routing)
    step = step_layout(load)
    listed = [
        f
        for f, v in (("--tp", o.tp), ("--weight-dtype", o.weight_dtype), ("--kv-dtype", o.kv_dtype))
        if isinstance(v, tuple)
    ]
    if listed and not wants_load(load):
        raise CostModelError(
            f"a comma list of {listed[0]} compares served configurations: give --engine with --concurrency or "
            "--request-rate"
        )
    if wants_load(load):
        if o.sweep_spec or dims["batch"] is not None or dims["context"] is not None:
            raise CostModelError(
                "--sweep, --batch and --context do not apply to a served model (the engine "
                "forms its own batches; --max-num-seqs limits them)"
            )
        predict_load(
            hws,
            layouts,
            fmt,
            load,
            input_len=o.input_len,
            output_len=o.output_len,
            pricing=conventions(
                o.dtype, o.execution, o.tp, o.overlap, o.timing, o.without, o.weight_dtype, o.kv_dtype, o.mla_form
            ),
        )
        return
    predict_models(
        hws,
        layouts,
        fmt,
        batch=dims["batch"],
        context=dims["context"],
        input_len=o.input_len,
        output_len=o.output_len,
        sweep_spec=o.sweep_spec,
        csv_path=o.csv_path,
        max_points=o.max_points,
        source=o.source,
        pricing=conventions(
            o.dtype, o.execution, o.tp, o.overlap, o.timing, o.without, o.weight_dtype, o.kv_dtype, o.mla_form
        )
        | step,
    )


def _predict_attention(hws, fmt, dims: dict, o) -> None:
    """predict without --model: attention workloads, one prediction per device or a sweep (``o``: predict's
    parameters)."""
    if (o.prompt_write or o.kernels) and o.sweep_spec:
        raise CostModelError("--prompt-write and --kernels apply to one attention layer's prediction, not a --sweep")
    model_only = [
        flag
        for flag, value in (
            ("--tp", o.tp != 1 or None),
            ("--source", o.source),
            ("--kv-heads", o.kv_heads),
            ("--weight-dtype", o.weight_dtype),
            ("--kv-dtype", o.kv_dtype),
            ("--mla-form", o.mla_form),
            ("--input-len", o.input_len),
            ("--output-len", o.output_len),
            ("--variants", o.variants or None),
            ("--routing", o.routing),
        )
        if value
    ]
    if model_only:
        raise CostModelError(f"{model_only[0]} applies with --model")
    if o.variant and o.variant.lower() == "mla":
        raise CostModelError(
            "--variant mla applies with --model (a model gives the latent's widths) or in "
            "`costmodel derive --variant mla`"
        )
    if o.csv_path is not None and not o.sweep_spec:
        raise CostModelError("--csv needs --sweep DIM=RANGE")
    from costmodel.attention.workload import workloads

    chosen = workloads(
        o.variant,
        o.groups,
        o.mode,
        dtype=o.dtype,
        layers=o.layers,
        execution=o.execution or DEFAULTS["execution"],
        cache_append=o.cache_append,
        **given(dims),
    )
    if o.sweep_spec:
        attention_sweep(hws, chosen, o.sweep_spec, fmt, o.csv_path, o.overlap, o.max_points, o.timing, o.without)
    else:
        attention_predict(hws, chosen, bool(o.variant), fmt, o.overlap, o.timing, o.without, o.prompt_write, o.kernels)


#: predict's options by what they ask, as its --help lists them.
predict.panels = {
    **dict.fromkeys(
        ("gpus", "fmt", "as_json", "html_path", "plot_path", "show_launch", "goodput", "metric_percentiles"),
        "Devices and output",
    ),
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
            "prompt_write",
            "kernels",
            "gemm_spec",
            "gemm_dtype",
            "sweep_spec",
            "csv_path",
            "max_points",
        ),
        "One attention layer (the default), and sweeps",
    ),
    **dict.fromkeys(
        (
            "model_name",
            "revision",
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
            "random_range_ratio",
            "spread",
            "lengths_file",
            "frontend",
            "evaluator",
            "time_limit",
            "power_limit",
            "price_per_gpu_hour",
        ),
        "Served under load (--engine with --concurrency or --request-rate)",
    ),
    **dict.fromkeys(
        (
            "engine_version",
            "max_num_batched_tokens",
            "max_num_seqs",
            "memory_fraction",
            "page_size",
            "max_model_len",
            "chunked_prefill",
            "prefix_caching",
            "async_scheduling",
            "speculative_config",
            "acceptance_length",
            "acceptance_rates",
            "prefix_len",
            "prefix_share",
            "turns",
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
    derive,
    recommend,
    hardware,
    models,
    cli_explain.explain,
    cli_web.web,
    cli_web.serve,
    capacity,
    plan_command,
    cli_figures.roofline,
    cli_figures.sweep_plot,
    cli_figures.calibrate,
    cli_figures.validate,
    reproduce,
):
    main.add_command(command)

__all__ = ["main"]
