"""The options of a served model under load (`costmodel predict --engine`, `costmodel plan`, the web page's fields), by what each sets."""

from __future__ import annotations

import click

from costmodel.cli.click_types import EngineChoice, Fraction, Loads, Objectives, PositiveNumber, engine_version
from costmodel.cli.feature_options import PREFIX_OPTIONS
from costmodel.cli.options import FilePath, NonNegative, Positive, choices
from costmodel.core.deadline import DEFAULT_S
from costmodel.core.vocab import MXFP4_ACTIVATIONS

#: The engine and the load: clients or a rate, how many requests, the warm-up.
LOAD_OPTIONS = [
    click.option(
        "--time-limit",
        type=click.FloatRange(min=0),
        default=DEFAULT_S,
        show_default=True,
        help="seconds a load curve may take; past it, the points priced so far, labelled as such",
    ),
    click.option(
        "--engine",
        "engine_name",
        type=EngineChoice(),
        help="with --model: serve it with this engine's continuous batching under load "
        "(--concurrency or --request-rate) [default with either: vllm]; name==release (vllm==0.8.5) pins "
        "the release whose defaults apply; a comma list (vllm,sglang) compares engines",
    ),
    click.option(
        "--concurrency",
        "--max-concurrency",
        "concurrency",
        type=Loads("count"),
        help="closed loop: clients, each sending its next request when its last one finishes; a comma list "
        "(1,4,16,64) or a range (1:256:x2) draws the load curve, one row per load",
    ),
    click.option(
        "--client-connections",
        type=Positive,
        help="with --concurrency: the benchmark client's connections, the most requests in flight; the "
        "others wait in the client, their clock running (an aiohttp client holds 100 unless told "
        "otherwise) [default: one per client]",
    ),
    click.option(
        "--request-rate",
        type=Loads("rate"),
        help="open loop: Poisson arrivals, requests per second; a comma list (1,2,5,10) draws the load curve",
    ),
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
        "--goodput",
        type=Objectives(),
        metavar="OBJECTIVES",
        help="with --engine: count the requests a second that meet every objective, as vllm bench serve's "
        "--goodput: 'ttft:200 tpot:50' (milliseconds; metrics ttft, tpot, e2el; simulated runs)",
    ),
    click.option(
        "--metric-percentiles",
        "metric_percentiles",
        type=Loads("rate"),
        metavar="PERCENTILES",
        help="with --engine: these percentiles of TTFT, TPOT, ITL and e2e latency, as vllm bench serve's "
        "--metric-percentiles: 50,90,99 (simulated runs)",
    ),
    click.option(
        "--launch",
        "show_launch",
        is_flag=True,
        default=False,
        help="with --engine: the engine's own launch command of each configuration (one replica) and the vllm bench "
        "serve command that would measure it",
    ),
    click.option(
        "--plot",
        "plot_path",
        type=str,
        metavar="FILE",
        help="with --engine: write the load's figure (.png, .svg, .pdf, .html): tokens/s per GPU against tokens/s "
        "per user, TTFT and TPOT against the load, one line per configuration",
    ),
]


#: The engine's settings (costmodel.engine.config.EngineFlags), under each engine's own names.
FLAG_OPTIONS = [
    click.option(
        "--engine-version",
        "engine_version",
        callback=engine_version,
        help="the engine's release whose defaults apply: vllm 0.8.x or 0.9-0.12, sglang 0.4.0-0.4.6 or 0.5.x, "
        "trtllm 1.0.x, atom 0.1.x [default: the latest of these]",
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
        "--max-model-len",
        "--context-length",
        "--max-seq-len",
        "max_model_len",
        type=Positive,
        help="the longest request (prompt and output) the engine takes: a longer one is refused, and the engine "
        "will not start unless one such request fits its KV cache [default: the model's]",
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
]


#: The requests' lengths and the front end they pass.
LENGTH_OPTIONS = [
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
        "--random-range-ratio",
        type=click.FloatRange(0.01, 1.0),
        help="vllm bench serve's spelling: lengths drawn uniformly from ratio x the length up to the length "
        "(--length-dist range --spread 1-ratio; 1: fixed)",
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
]


#: Where the engines sit (costmodel.engine.layout.Layout) and how they are evaluated.
LAYOUT_OPTIONS = [
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
]


#: Disaggregated pools: each pool's workers, devices and limits, and the KV link.
POOL_OPTIONS = [
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
            click.option(f"--{role}-workers", type=Positive, help=f"with --disaggregated: {role} workers [default: 1]"),
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
    click.option("--decode-gpu", metavar="GPU", help="with --disaggregated: the decode pool's device [default: --gpu]"),
    click.option(
        "--kv-link-bandwidth",
        type=PositiveNumber(),
        metavar="BYTES_PER_S",
        help="with --disaggregated: bytes per second one way per device of the link the KV cache "
        "crosses [default: the profiles' interconnect or network port]",
    ),
]


def engine_options(func):
    """The options of a served model under load, in the order its --help lists them."""
    from costmodel.cli.feature_options import FEATURE_OPTIONS

    for option in reversed(
        [*LOAD_OPTIONS, *FLAG_OPTIONS, *FEATURE_OPTIONS, *LENGTH_OPTIONS, *LAYOUT_OPTIONS, *POOL_OPTIONS]
    ):
        func = option(func)
    return func


#: The requests' shape beside their load, on the commands that search layouts (plan, capacity, recommend).
REQUEST_KEYS = (
    "warmup_requests",
    "burstiness",
    "length_dist",
    "random_range_ratio",
    "spread",
    "lengths_file",
    "frontend",
)
#: The prefix cache's requests (a shared prefix, conversations): simulated, so on predict, plan and capacity only.
CACHE_KEYS = ("prefix_len", "prefix_share", "turns")


def request_options(*more: str):
    """Options of :data:`REQUEST_KEYS` (and ``more`` of the load options, such as num_requests), declared as
    predict declares them, for a command that searches layouts."""

    def decorate(func):
        for key in reversed((*more, *REQUEST_KEYS)):
            func = _BY_NAME[key](func)
        return func

    return decorate


def request_arguments(opts: dict) -> list[str]:
    """The :data:`REQUEST_KEYS` options given (not at their defaults) as ``costmodel predict`` arguments, each by its
    first long name."""
    return _arguments(_REQUEST_PARAMS, opts)


def engine_flag_options(func):
    """The engine's settings alone (:data:`FLAG_OPTIONS`), for commands that search layouts (plan, capacity,
    recommend)."""
    for option in reversed(FLAG_OPTIONS):
        func = option(func)
    return func


def flag_arguments(settings: dict) -> list[str]:
    """The engine settings given (``settings``: FLAG_OPTIONS' parameters) as ``costmodel predict`` arguments, each by
    its first long name."""
    return _arguments(_FLAG_PARAMS, settings)


def _arguments(params, values: dict) -> list[str]:
    """``values`` (by parameter name) of ``params`` that are given and not their defaults, as command-line
    arguments: a switch by its on or off name, any other by its first long name and the value."""
    out = []
    for param in params:
        value = values.get(param.name)
        if value is None or value == param.default:
            continue
        if param.is_flag:
            out.append(param.opts[0] if value else param.secondary_opts[0])
        else:
            out += [param.opts[0], str(value)]
    return out


def _param(option) -> click.Parameter:
    """The click parameter an option decorator declares."""
    return option(lambda: None).__click_params__[0]


#: The click parameters :data:`FLAG_OPTIONS` declare, and their names (for commands' --help panels).
_FLAG_PARAMS = tuple(_param(option) for option in FLAG_OPTIONS)
ENGINE_FLAG_KEYS = tuple(param.name for param in _FLAG_PARAMS)
#: The load and length options by parameter name, and those of :data:`REQUEST_KEYS`.
_BY_NAME = {_param(option).name: option for option in [*LOAD_OPTIONS, *LENGTH_OPTIONS, *PREFIX_OPTIONS]}
_REQUEST_PARAMS = tuple(_param(_BY_NAME[key]) for key in (*REQUEST_KEYS, *CACHE_KEYS))
