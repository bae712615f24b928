"""``costmodel predict --model M --engine E --concurrency C`` (or ``--request-rate R``): a served model under
load, parsed, checked and handed to :func:`costmodel.engine.served.serve`."""

from __future__ import annotations

from costmodel.cli.load_configs import configurations, draw_curve, launch_lines, serve_all
from costmodel.cli.options import emit
from costmodel.core.deadline import DEFAULT_S, limited
from costmodel.core.errors import CostModelError

#: The keys engine_options adds to a command's parameters.
LOAD_KEYS = (
    "time_limit",
    "engine_name",
    "concurrency",
    "client_connections",
    "request_rate",
    "burstiness",
    "num_requests",
    "warmup_requests",
    "engine_version",
    "max_num_batched_tokens",
    "max_num_seqs",
    "memory_fraction",
    "page_size",
    "max_model_len",
    "chunked_prefill",
    "prefix_caching",
    "async_scheduling",
    "mxfp4_activations",
    "speculative_config",
    "acceptance_length",
    "acceptance_rates",
    "prefix_len",
    "prefix_share",
    "turns",
    "power_limit",
    "price_per_gpu_hour",
    "length_dist",
    "random_range_ratio",
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
    "plot_path",
    "show_launch",
    "goodput",
    "metric_percentiles",
)
#: The options of a disaggregated deployment's pools.
POOL_KEYS = ("tp", "workers", "max_num_seqs", "expert_parallel", "attention_dp")


#: The load options' values when not given.
LOAD_DEFAULTS = {
    "time_limit": DEFAULT_S,
    "prefix_len": 0,
    "turns": 1,
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
    "show_launch": False,
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
    "speculative_config": "--speculative-config",
    "acceptance_length": "--acceptance-length",
    "acceptance_rates": "--acceptance-rates",
    "prefix_len": "--prefix-len",
    "prefix_share": "--prefix-share",
    "turns": "--turns",
    "power_limit": "--power-limit",
    "price_per_gpu_hour": "--price-per-gpu-hour",
    "show_launch": "--launch",
    "plot_path": "--plot",
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
    from costmodel.render.serving import load_records, load_table

    _check_load(load, pricing)
    _check_plot(load["plot_path"])
    loads = load_points(load)
    requests = requests_of(load, input_len, output_len).with_(
        concurrency=loads[0][0],
        request_rate=loads[0][1],
        client_connections=load["client_connections"],
        goodput=load["goodput"] or (),
        percentiles=_percentiles(load["metric_percentiles"]),
    )
    configs = configurations(load, pricing)
    layout, flags, kw = configs[0]
    if load["disaggregated"]:
        if len(configs) > 1:
            raise CostModelError("comma lists of --tp, --engine and dtypes compare aggregated deployments")
        predict_disaggregated(
            hws,
            layouts,
            fmt,
            load,
            [requests.with_(concurrency=c, request_rate=r) for c, r in loads],
            layout,
            flags,
            kw,
        )
        return
    _no_pools(load)
    from costmodel.price.bands import served_label

    deadline = limited(load["time_limit"])
    results, setups = serve_all(hws, layouts, loads, requests, configs, deadline)
    curve = len(loads) > 1 or len(configs) > 1
    if load["plot_path"] is not None:
        draw_curve(results, load["plot_path"])
    dumped = [r.model_dump(mode="json") for r in results]
    table = load_table(results, served_label()) if fmt == "table" else ""
    if load["show_launch"]:
        by_id = {m.id: m for m in layouts}
        for d, r, (layout, flags, kw) in zip(dumped, results, setups):
            d |= launch_lines(by_id[r.model], r, layout, flags, kw)
        table += "".join(f"\n\nlaunch: {d['launch']}\nmeasure: {d['bench']}" for d in dumped)
    table = (deadline.stopped[:1].upper() + deadline.stopped[1:] + "\n\n" if deadline.stopped else "") + table
    emit(
        fmt,
        [{"points": dumped, **({"stopped": deadline.stopped} if deadline.stopped else {})}] if curve else dumped,
        [rec for r in results for rec in load_records(r)],
        lambda: table,
        single=len(results) == 1 or curve,
    )


def _ratio(load: dict) -> dict:
    """--random-range-ratio as the --length-dist and --spread it stands for (vllm bench serve's lengths: uniform
    from ratio x the length up to the length)."""
    ratio = load.get("random_range_ratio")
    if ratio is None:
        return {}
    if load["length_dist"] != "fixed" or load["spread"]:
        raise CostModelError("--random-range-ratio sets --length-dist range and --spread; give one or the other")
    return dict(length_dist="range", spread=1 - ratio) if ratio < 1 else {}


def requests_of(opts: dict, input_len, output_len):
    """The requests the options describe (a Load without its clients or rate): their lengths, fixed, drawn around
    --input-len and --output-len (--length-dist, --spread, --random-range-ratio) or read (--lengths-file); how many
    and the warm-up; an open loop's burstiness. ``opts``: the options given, by parameter name (absent: default)."""
    from costmodel.engine.load import Load

    values = {}
    if opts.get("lengths_file") is not None:
        if opts.get("length_dist", "fixed") != "fixed" or opts.get("random_range_ratio") is not None:
            raise CostModelError(
                "--lengths-file gives the lengths; --length-dist and --random-range-ratio do not apply with it"
            )
        prompts, outputs = read_lengths(opts["lengths_file"])
        values = dict(input_dist="file", output_dist="file", input_values=prompts, output_values=outputs)
        input_len, output_len = round(sum(prompts) / len(prompts)), round(sum(outputs) / len(outputs))
    if input_len is None or output_len is None:
        raise CostModelError(
            "a served model needs --input-len and --output-len (the requests' lengths), or --lengths-file"
        )
    opts = opts | _ratio(opts)
    return Load(
        input_len,
        output_len,
        num_requests=opts.get("num_requests"),
        warmup_requests=opts.get("warmup_requests") or 0,
        burstiness=opts.get("burstiness", 1.0),
        input_dist=opts.get("length_dist", "fixed"),
        output_dist=opts.get("length_dist", "fixed"),
        spread=opts.get("spread") or 0.0,
        prefix_len=opts.get("prefix_len") or 0,
        prefix_share=_prefix_share(opts),
        turns=opts.get("turns") or 1,
    ).with_(**values)


def _prefix_share(opts: dict) -> float:
    """--prefix-share, 1 (every request) where only --prefix-len is given, 0 without a prefix."""
    share = opts.get("prefix_share")
    if share is not None and not opts.get("prefix_len"):
        raise CostModelError("--prefix-share goes with --prefix-len (the shared prefix's tokens)")
    return (1.0 if share is None else share) if opts.get("prefix_len") else 0.0


def _check_plot(path) -> None:
    if path is not None:
        from costmodel.render.plots import check_output

        check_output(path)


def _no_pools(load: dict) -> None:
    """A pool's option given without --disaggregated: an error naming it."""
    pooled = [f"{r}_{k}" for r in ("prefill", "decode") for k in POOL_KEYS if load[f"{r}_{k}"] not in (None, False)]
    pooled += [k for k in ("decode_gpu", "kv_link_bandwidth") if load[k] is not None]
    if pooled:
        raise CostModelError(f"--{pooled[0].replace('_', '-')} applies with --disaggregated")


def predict_disaggregated(hws: list, layouts: list, fmt: str, load: dict, curve, layout, flags, kw: dict) -> None:
    """Every model layout with its prefill pool on every device, decode on --decode-gpu or the same device
    (``curve``: a Load per load point; ``layout``, ``flags``: :func:`predict_load`'s Layout and EngineFlags)."""
    requests = curve[0]
    from dataclasses import replace

    from costmodel.deploy.disagg import Pool, serve_disaggregated
    from costmodel.hardware.catalog import load_profile

    given = {
        "--max-num-seqs": flags.max_num_seqs is not None,
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
            f"{flag} does not apply with --disaggregated (each pool is one engine of its own layout; lengths "
            f"fixed or drawn by --length-dist){hint.get(flag, '')}"
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
            point,
            prefill=pool("prefill"),
            decode=pool("decode", decode_hw),
            flags=replace(flags, max_num_seqs=None, max_num_batched_tokens=None),
            kv_link_bytes_per_s=load["kv_link_bandwidth"],
            **kw,
        )
        for hw in hws
        for m in layouts
        for point in curve
    ]
    if load["plot_path"] is not None:
        draw_curve(results, load["plot_path"])
    emit(
        fmt,
        [{"points": [r.model_dump(mode="json") for r in results]}]
        if len(curve) > 1
        else [r.model_dump(mode="json") for r in results],
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


def _check_load(load: dict, pricing: dict) -> None:
    """A served model's load options agree (a closed or an open loop, each with its own options), and the
    kernel conventions an engine fixes are not asked to change."""
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


def load_points(load: dict) -> list[tuple[int | None, float | None]]:
    """(concurrency, request rate) of each load point --concurrency or --request-rate names (one, or a curve)."""
    if load["concurrency"] is not None and load["request_rate"] is not None:
        raise CostModelError("give --concurrency or --request-rate, not both")
    if load["concurrency"] is not None:
        return [(c, None) for c in load["concurrency"]]
    if load["request_rate"] is not None:
        return [(None, r) for r in load["request_rate"]]
    raise CostModelError("--engine needs a load: --concurrency C (closed loop) or --request-rate R (Poisson)")


def _percentiles(ps) -> tuple:
    """--metric-percentiles, each in (0, 100]."""
    for p in ps or ():
        if p > 100:
            raise CostModelError(f"--metric-percentiles takes percentiles in (0, 100], got {p:g}")
    return tuple(ps or ())
