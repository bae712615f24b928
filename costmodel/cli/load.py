"""``costmodel predict --model M --engine E --concurrency C`` (or ``--request-rate R``): a served model under
load, parsed, checked and handed to :func:`costmodel.engine.served.serve`."""

from __future__ import annotations

import click

from costmodel.cli.options import FilePath, NonNegative, Positive, PositiveNumber, choices, emit
from costmodel.core.errors import CostModelError
from costmodel.core.vocab import ENGINE_NAMES, MXFP4_ACTIVATIONS

#: The keys engine_options adds to a command's parameters.
LOAD_KEYS = (
    "engine_name",
    "concurrency",
    "client_connections",
    "request_rate",
    "burstiness",
    "num_requests",
    "warmup_requests",
    "max_num_batched_tokens",
    "max_num_seqs",
    "memory_fraction",
    "page_size",
    "chunked_prefill",
    "prefix_caching",
    "async_scheduling",
    "mxfp4_activations",
    "length_dist",
    "spread",
    "lengths_file",
    "evaluator",
    "frontend",
    "expert_parallel",
    "attention_dp",
    "replicas",
    "pipeline_parallel",
    "expert_parallel_size",
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
)
#: The options of a disaggregated deployment's pools.
POOL_KEYS = ("tp", "workers", "max_num_seqs", "expert_parallel", "attention_dp")


class Fraction(click.ParamType):
    name = "FRACTION"

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number in (0, 1]", param, ctx)
        if not 0 < x <= 1:
            self.fail(f"{value!r} is not in (0, 1]", param, ctx)
        return x


def engine_options(func):
    """The options of a served model under load."""
    options = [
        click.option(
            "--engine",
            "engine_name",
            type=choices(ENGINE_NAMES),
            help="with --model: serve it with this engine's continuous batching under load "
            "(--concurrency or --request-rate) [default with either: vllm]",
        ),
        click.option(
            "--concurrency",
            "--max-concurrency",
            "concurrency",
            type=Positive,
            help="closed loop: clients, each sending its next request when its last one finishes",
        ),
        click.option(
            "--client-connections",
            type=Positive,
            help="with --concurrency: the benchmark client's connections, the most requests in flight; the "
            "others wait in the client, their clock running (an aiohttp client holds 100 unless told "
            "otherwise) [default: one per client]",
        ),
        click.option("--request-rate", type=PositiveNumber(), help="open loop: Poisson arrivals, requests per second"),
        click.option(
            "--burstiness",
            type=PositiveNumber(allow_inf=True),
            default=1.0,
            show_default=True,
            help="with --request-rate: the arrivals' gaps gamma-distributed with this shape, as vLLM's bench "
            "serve draws them (1: Poisson; below 1 burstier, above 1 more even; inf: evenly spaced)",
        ),
        click.option(
            "--num-requests",
            "--num-prompts",
            "num_requests",
            type=Positive,
            help="requests in the run [default: 10 per client; 1,000 at a request rate]",
        ),
        click.option(
            "--warmup-requests",
            "--warmup-request-count",
            "warmup_requests",
            type=NonNegative,
            default=0,
            show_default=True,
            help="requests run first and left out of the statistics",
        ),
        click.option(
            "--max-num-batched-tokens",
            "--max-num-tokens",
            "--chunked-prefill-size",
            "max_num_batched_tokens",
            type=Positive,
            help="the engine's token budget per iteration",
        ),
        click.option(
            "--max-num-seqs",
            "--max-batch-size",
            "--max-running-requests",
            "max_num_seqs",
            type=Positive,
            help="the engine's limit of running sequences",
        ),
        click.option(
            "--gpu-memory-utilization",
            "--mem-fraction-static",
            "--free-gpu-memory-fraction",
            "memory_fraction",
            type=Fraction(),
            help="the engine's memory fraction for weights and cache "
            "(vLLM, SGLang) or of free memory for the cache (TensorRT-LLM)",
        ),
        click.option(
            "--block-size", "--page-size", "--tokens-per-block", "page_size", type=Positive, help="tokens per KV page"
        ),
        click.option(
            "--enable-chunked-prefill/--no-enable-chunked-prefill",
            "chunked_prefill",
            default=None,
            help="split prompts over iterations [default: the engine's]",
        ),
        click.option(
            "--enable-prefix-caching/--no-enable-prefix-caching",
            "prefix_caching",
            default=None,
            help="a preempted request's KV stays cached for its return instead of being recomputed "
            "[default: on for vLLM, off for SGLang and TensorRT-LLM]",
        ),
        click.option(
            "--async-scheduling/--no-async-scheduling",
            "async_scheduling",
            default=None,
            help="the engine schedules each iteration while the one before runs, so a request that comes "
            "during an iteration starts an iteration later (SGLang's overlap schedule, TensorRT-LLM's "
            "overlap scheduler) [default: on for SGLang and TensorRT-LLM, off for vLLM]",
        ),
        click.option(
            "--mxfp4-activations",
            type=choices(MXFP4_ACTIVATIONS),
            help="how MXFP4 experts take their activations on a GPU with FP4 math: bf16 (the weights "
            "dequantized in the kernel) or mxfp8 (an fp8-rate MMA) [default: bf16 for vLLM, mxfp8 for "
            "SGLang and TensorRT-LLM]",
        ),
        click.option(
            "--length-dist",
            type=choices(("fixed", "uniform", "range", "normal")),
            default="fixed",
            show_default=True,
            help="request lengths around --input-len and --output-len; range: uniform "
            "from (1 - spread) x the length up to the length itself, as the random dataset of vLLM's "
            "benchmark_serving.py and InferenceX's draws them (--random-range-ratio 1 - spread)",
        ),
        click.option(
            "--spread",
            type=click.FloatRange(0, 0.99),
            default=0.0,
            show_default=True,
            help="with --length-dist uniform: half-width; range: the share below the length; normal: "
            "standard deviation (a share of the mean)",
        ),
        click.option(
            "--frontend",
            type=choices(("dynamo", "engine")),
            default="dynamo",
            show_default=True,
            help="the front end the requests pass, whose latency is added to TTFT: Dynamo's frontend, or "
            "the engine's own OpenAI server (vllm serve; the other engines' own servers are not "
            "measured apart and take Dynamo's value)",
        ),
        click.option(
            "--lengths-file",
            type=FilePath(),
            metavar="FILE",
            help="request lengths, one request per line: prompt and output tokens (CSV or spaces); the "
            "requests take them in order, cycled",
        ),
        click.option(
            "--expert-parallel/--no-expert-parallel",
            "--enable-expert-parallel",
            "expert_parallel",
            default=False,
            show_default=True,
            help="a mixture of experts' routed experts spread over the --tp devices (expert parallel, "
            "attention still tensor parallel) instead of every expert sharded",
        ),
        click.option(
            "--expert-parallel-size",
            "--moe-ep-size",
            "expert_parallel_size",
            type=Positive,
            help="a mixture of experts' routed experts in this many expert-parallel groups within the --tp "
            "devices, each group sharding its experts' width (TensorRT-LLM's moe_expert_parallel_size; "
            "--tp: --expert-parallel)",
        ),
        click.option(
            "--attention-dp",
            "--data-parallel-size",
            "--dp-size",
            "attention_dp",
            type=Positive,
            help="attention data parallel over this many groups of --tp devices, each an engine with its "
            "own requests, a mixture of experts' routed experts over all of them: whole experts with "
            "--expert-parallel, else every expert's width sharded (vLLM's data parallel without "
            "--enable-expert-parallel) [default: 1]",
        ),
        click.option(
            "--replicas",
            type=Positive,
            help="data parallel: copies of the deployment behind a router, each with an even share of the "
            "clients (or of the request rate) [default: 1]",
        ),
        click.option(
            "--pipeline-parallel-size",
            "--pp",
            "--pp-size",
            "pipeline_parallel",
            type=Positive,
            help="pipeline stages of --tp devices each, the layers split among them [default: 1]",
        ),
        click.option(
            "--evaluator",
            type=choices(("simulation", "steady-state")),
            default="simulation",
            show_default=True,
            help="iteration-level simulation, or the steady-state closed form",
        ),
        click.option(
            "--disaggregated",
            is_flag=True,
            default=False,
            help="prefill and decode on separate pools of workers, the KV cache moving between them "
            "(--prefill-* and --decode-* set each pool)",
        ),
        *[
            opt
            for role in ("prefill", "decode")
            for opt in (
                click.option(
                    f"--{role}-tp",
                    type=Positive,
                    help=f"with --disaggregated: devices of a {role} worker [default: --tp]",
                ),
                click.option(
                    f"--{role}-workers", type=Positive, help=f"with --disaggregated: {role} workers [default: 1]"
                ),
                click.option(
                    f"--{role}-max-num-seqs",
                    type=Positive,
                    help=f"with --disaggregated: a {role} worker's limit of sequences [default: the engine's]",
                ),
                click.option(
                    f"--{role}-expert-parallel",
                    is_flag=True,
                    default=False,
                    help=f"with --disaggregated: a {role} worker spreads the routed experts over its devices",
                ),
                click.option(
                    f"--{role}-attention-dp",
                    type=Positive,
                    help=f"with --disaggregated: a {role} worker is this many attention data parallel "
                    "groups of its tp devices, each with its own requests, the routed experts over all of "
                    f"them (whole with --{role}-expert-parallel, else each expert's width sharded) "
                    "[default: 1]",
                ),
            )
        ],
        click.option(
            "--decode-gpu", metavar="GPU", help="with --disaggregated: the decode pool's device [default: --gpu]"
        ),
        click.option(
            "--kv-link-bandwidth",
            type=PositiveNumber(),
            metavar="BYTES_PER_S",
            help="with --disaggregated: bytes per second one way per device of the link the KV cache "
            "crosses [default: the profiles' interconnect or network port]",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


#: The load options' values when not given.
LOAD_DEFAULTS = {
    "length_dist": "fixed",
    "spread": 0.0,
    "evaluator": "simulation",
    "warmup_requests": 0,
    "burstiness": 1.0,
    "frontend": "dynamo",
    "expert_parallel": False,
    "disaggregated": False,
    "prefill_expert_parallel": False,
    "decode_expert_parallel": False,
}
#: The flag of each load option whose name is not its key's.
LOAD_FLAGS = {
    "engine_name": "--engine",
    "memory_fraction": "--gpu-memory-utilization",
    "page_size": "--block-size",
    "chunked_prefill": "--enable-chunked-prefill",
    "prefix_caching": "--enable-prefix-caching",
    "async_scheduling": "--async-scheduling",
    "mxfp4_activations": "--mxfp4-activations",
}


def step_layout(load: dict) -> dict:
    """The layout options a model step takes too when no engine serves it, moved out of ``load`` into pricing
    conventions: its experts spread over its --tp devices (``expert_parallel``) and its attention data parallel
    groups (``attention_dp``)."""
    if any(load[k] is not None for k in ("engine_name", "concurrency", "request_rate")):
        return {}
    step = {}
    if load["expert_parallel"]:
        step["expert_parallel"], load["expert_parallel"] = True, LOAD_DEFAULTS["expert_parallel"]
    if load["attention_dp"] is not None:
        step["attention_dp"], load["attention_dp"] = load["attention_dp"], None
    return step


def wants_load(load: dict) -> bool:
    """Whether the options ask for a served model; an engine option without one is an error."""
    served = any(load[k] is not None for k in ("engine_name", "concurrency", "request_rate"))
    if not served:
        given = [k for k, v in load.items() if v != LOAD_DEFAULTS.get(k)]
        if given:
            flag = LOAD_FLAGS.get(given[0], "--" + given[0].replace("_", "-"))
            raise CostModelError(f"{flag} applies to a served model (--engine with --concurrency or --request-rate)")
    return served


def predict_load(hws: list, layouts: list, fmt: str, load: dict, *, input_len, output_len, pricing: dict) -> None:
    """Every model layout on every device under the load."""
    from costmodel.engine.config import EngineFlags
    from costmodel.engine.layout import Layout
    from costmodel.engine.load import Load
    from costmodel.engine.served import serve
    from costmodel.render.serving import load_records, load_table

    values = {}
    if load["lengths_file"] is not None:
        if load["length_dist"] != "fixed":
            raise CostModelError("--lengths-file gives the lengths; --length-dist does not apply with it")
        prompts, outputs = read_lengths(load["lengths_file"])
        values = dict(input_dist="file", output_dist="file", input_values=prompts, output_values=outputs)
        input_len, output_len = round(sum(prompts) / len(prompts)), round(sum(outputs) / len(outputs))
    if input_len is None or output_len is None:
        raise CostModelError(
            "a served model needs --input-len and --output-len (the requests' lengths), or --lengths-file"
        )
    if load["concurrency"] is None and load["request_rate"] is None:
        raise CostModelError("--engine needs a load: --concurrency C (closed loop) or --request-rate R (Poisson)")
    if load["concurrency"] is not None and load["request_rate"] is not None:
        raise CostModelError("give --concurrency or --request-rate, not both")
    if load["burstiness"] != 1.0 and load["request_rate"] is None:
        raise CostModelError("--burstiness applies with --request-rate (an open loop's arrivals)")
    if load["client_connections"] is not None and load["concurrency"] is None:
        raise CostModelError("--client-connections applies with --concurrency (a closed loop's requests in flight)")
    if pricing.get("dtype") not in (None, "bf16", "fp16"):
        raise CostModelError(
            f"--dtype {pricing['dtype']} does not apply to a served model (activations in bf16; "
            "--weight-dtype and --kv-dtype set the quantisation)"
        )
    # an engine runs fused attention, the overlap rule and every mechanism of the device's time model
    ignored = [
        flag
        for flag, given in (
            ("--execution", pricing.get("execution") not in (None, "fused")),
            ("--overlap", pricing.get("overlap") not in (None, "max")),
            ("--without", bool(pricing.get("without"))),
            ("--mla-form", pricing.get("mla_form") is not None),
        )
        if given
    ]
    if ignored:
        raise CostModelError(f"{ignored[0]} does not apply to a served model (the engine runs its own kernels)")
    requests = Load(
        input_len,
        output_len,
        concurrency=load["concurrency"],
        request_rate=load["request_rate"],
        num_requests=load["num_requests"],
        warmup_requests=load["warmup_requests"],
        burstiness=load["burstiness"],
        input_dist=load["length_dist"],
        output_dist=load["length_dist"],
        spread=load["spread"],
        client_connections=load["client_connections"],
    ).with_(**values)
    layout = Layout(
        tp=pricing["tp"],
        expert_parallel=load["expert_parallel"],
        attention_dp=load["attention_dp"] or 1,
        pipeline_parallel=load["pipeline_parallel"] or 1,
        replicas=load["replicas"] or 1,
        expert_parallel_size=load["expert_parallel_size"],
    )
    flags = EngineFlags(**{k: load[k] for k in EngineFlags.__dataclass_fields__})
    kw = dict(
        engine_name=load["engine_name"] or "vllm",
        weight_dtype=pricing.get("weight_dtype"),
        kv_dtype=pricing.get("kv_dtype"),
        timing=pricing.get("timing", "graph"),
        evaluator=load["evaluator"],
        frontend=load["frontend"],
    )
    if load["disaggregated"]:
        predict_disaggregated(hws, layouts, fmt, load, requests, layout, flags, kw)
        return
    pooled = [f"{r}_{k}" for r in ("prefill", "decode") for k in POOL_KEYS if load[f"{r}_{k}"] not in (None, False)]
    pooled += [k for k in ("decode_gpu", "kv_link_bandwidth") if load[k] is not None]
    if pooled:
        raise CostModelError(f"--{pooled[0].replace('_', '-')} applies with --disaggregated")
    from costmodel.price.bands import served_label

    results = [serve(m, hw, requests, layout=layout, flags=flags, **kw) for hw in hws for m in layouts]
    emit(
        fmt,
        [r.model_dump(mode="json") for r in results],
        [rec for r in results for rec in load_records(r)],
        lambda: load_table(results, served_label()),
        single=len(results) == 1,
    )


def predict_disaggregated(hws: list, layouts: list, fmt: str, load: dict, requests, layout, flags, kw: dict) -> None:
    """Every model layout with its prefill pool on every device, decode on --decode-gpu or the same device
    (``requests``, ``layout``, ``flags``: :func:`predict_load`'s Load, Layout and EngineFlags)."""
    from costmodel.deploy.disagg import Pool, serve_disaggregated
    from costmodel.engine.config import EngineFlags
    from costmodel.hardware.catalog import load_profile

    given = {
        "--max-num-seqs": flags.max_num_seqs is not None,
        "--gpu-memory-utilization": flags.memory_fraction is not None,
        "--block-size": flags.page_size is not None,
        "--enable-chunked-prefill": flags.chunked_prefill is not None,
        "--enable-prefix-caching": flags.prefix_caching is not None,
        "--async-scheduling": flags.async_scheduling is not None,
        "--expert-parallel": layout.expert_parallel,
        "--attention-dp": layout.attention_dp != 1,
        "--replicas": layout.replicas != 1,
        "--pipeline-parallel-size": layout.pipeline_parallel != 1,
        "--expert-parallel-size": layout.expert_parallel_size is not None,
        "--lengths-file": requests.input_values is not None,
        "--client-connections": requests.client_connections is not None,
    }
    unsupported = [flag for flag, on in given.items() if on]
    if unsupported:
        hint = {
            "--max-num-seqs": "; give --prefill-max-num-seqs and --decode-max-num-seqs",
            "--expert-parallel": "; give --prefill-expert-parallel and --decode-expert-parallel",
        }
        flag = unsupported[0]
        raise CostModelError(
            f"{flag} does not apply with --disaggregated (each pool takes the engine's defaults "
            f"for it; lengths fixed or drawn by --length-dist){hint.get(flag, '')}"
        )
    decode_hw = load_profile(load["decode_gpu"]) if load["decode_gpu"] else None

    def pool(role: str, gpu=None) -> Pool:
        return Pool(
            tp=load[f"{role}_tp"] or layout.tp,
            workers=load[f"{role}_workers"] or 1,
            max_num_seqs=load[f"{role}_max_num_seqs"],
            max_num_batched_tokens=flags.max_num_batched_tokens,
            expert_parallel=load[f"{role}_expert_parallel"],
            gpu=gpu,
            attention_dp=load[f"{role}_attention_dp"] or 1,
        )

    results = [
        serve_disaggregated(
            m,
            hw,
            requests,
            prefill=pool("prefill"),
            decode=pool("decode", decode_hw),
            flags=EngineFlags(mxfp4_activations=flags.mxfp4_activations),
            kv_link_bytes_per_s=load["kv_link_bandwidth"],
            **kw,
        )
        for hw in hws
        for m in layouts
    ]
    emit(
        fmt,
        [r.model_dump(mode="json") for r in results],
        [r.record() for r in results],
        lambda: "\n\n".join(str(r) for r in results),
        single=len(results) == 1,
    )


def read_lengths(path: str) -> tuple[list[int], list[int]]:
    """(prompt lengths, output lengths) of a lengths file: two whole numbers per line, a header line allowed."""
    import re

    from costmodel.core.files import read_text
    from costmodel.core.vocab import whole

    prompts, outputs = [], []
    for i, line in enumerate(read_text(path, "lengths file").splitlines(), 1):
        cells = [c for c in re.split(r"[,\s]+", line.strip()) if c]
        if not cells or cells[0].startswith("#"):
            continue
        numbers = [whole(c) for c in cells]
        if len(cells) != 2 or None in numbers or min(numbers) < 1:
            if i == 1 and all(n is None for n in numbers):
                continue  # a header
            raise CostModelError(
                f"{path}: line {i}: expected two whole numbers >= 1 (prompt and output tokens), "
                f"got {line.strip()[:80]!r}"
            )
        prompts.append(numbers[0])
        outputs.append(numbers[1])
    if not prompts:
        raise CostModelError(f"{path}: no request lengths (two whole numbers per line)")
    return prompts, outputs
