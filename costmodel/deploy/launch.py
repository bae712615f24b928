"""A predicted configuration as the engine's own launch command, and the benchmark command that would measure it.

Each flag is the engine's documented spelling (:data:`ENGINE_FLAGS`, with the source file that declares it):

- vLLM 0.12 ``vllm serve`` (vllm/engine/arg_utils.py EngineArgs.add_cli_args; ``vllm bench serve`` in
  vllm/benchmarks/serve.py and datasets.py);
- SGLang 0.5 ``python -m sglang.launch_server`` (python/sglang/srt/server_args.py ServerArgs.add_cli_args; with
  ``--enable-dp-attention`` its ``--tp-size`` counts every device of the data parallel groups);
- ATOM 0.1 ``python -m atom.entrypoints.openai_server`` (ROCm/ATOM atom/model_engine/arg_utils.py
  EngineArgs.add_cli_args @0027562: --model, --tensor-parallel-size, --data-parallel-size, --enable-dp-attention,
  --enable-expert-parallel, --max-num-batched-tokens, --max-num-seqs, --gpu-memory-utilization, --block-size,
  --max-model-len, --kv_cache_dtype bf16|fp8, --enable_prefix_caching);
- TensorRT-LLM 1.x ``trtllm-serve`` (tensorrt_llm/commands/serve.py: --tp_size, --pp_size, --ep_size,
  --max_batch_size, --max_num_tokens, --max_seq_len, --kv_cache_free_gpu_memory_fraction,
  --enable_chunked_prefill; the KV cache's dtype, attention data parallel and the overlap scheduler are settings
  of its ``--extra_llm_api_options`` YAML, written beside the command).

A deployment of ``replicas`` copies is that many launches behind a router; the command is one replica's.
:func:`parse` reads a command back into the engine, layout and settings it states (the round trip the tests hold).
"""

from __future__ import annotations

import shlex

from costmodel.core.errors import CostModelError
from costmodel.engine.config import EngineFlags
from costmodel.engine.layout import Layout

#: Every flag a launch command here may carry, by engine: our setting -> the engine's flag.
ENGINE_FLAGS = {
    "vllm": {
        "tp": "--tensor-parallel-size",
        "pipeline_parallel": "--pipeline-parallel-size",
        "attention_dp": "--data-parallel-size",
        "expert_parallel": "--enable-expert-parallel",
        "max_num_batched_tokens": "--max-num-batched-tokens",
        "max_num_seqs": "--max-num-seqs",
        "memory_fraction": "--gpu-memory-utilization",
        "page_size": "--block-size",
        "max_model_len": "--max-model-len",
        "kv_dtype": "--kv-cache-dtype",
        "quantization": "--quantization",
        "revision": "--revision",
        "kv_transfer_config": "--kv-transfer-config",
        "prefix_caching": ("--enable-prefix-caching", "--no-enable-prefix-caching"),
        "async_scheduling": ("--async-scheduling", "--no-async-scheduling"),
    },
    "sglang": {
        "tp": "--tp-size",
        "pipeline_parallel": "--pp-size",
        "attention_dp": "--dp-size",
        "dp_attention": "--enable-dp-attention",
        "expert_parallel": "--ep-size",
        "max_num_batched_tokens": "--chunked-prefill-size",
        "max_num_seqs": "--max-running-requests",
        "memory_fraction": "--mem-fraction-static",
        "page_size": "--page-size",
        "max_model_len": "--context-length",
        "kv_dtype": "--kv-cache-dtype",
        "quantization": "--quantization",
        "revision": "--revision",
        "disaggregation_mode": "--disaggregation-mode",
        "prefix_caching": ("", "--disable-radix-cache"),
        "async_scheduling": ("", "--disable-overlap-schedule"),
    },
    "atom": {
        "tp": "--tensor-parallel-size",
        "attention_dp": "--data-parallel-size",
        "dp_attention": "--enable-dp-attention",
        "expert_parallel": "--enable-expert-parallel",
        "max_num_batched_tokens": "--max-num-batched-tokens",
        "max_num_seqs": "--max-num-seqs",
        "memory_fraction": "--gpu-memory-utilization",
        "page_size": "--block-size",
        "max_model_len": "--max-model-len",
        "kv_dtype": "--kv_cache_dtype",
        "prefix_caching": ("--enable_prefix_caching", ""),
    },
    "trtllm": {
        "tp": "--tp_size",
        "pipeline_parallel": "--pp_size",
        "expert_parallel": "--ep_size",
        "max_num_batched_tokens": "--max_num_tokens",
        "max_num_seqs": "--max_batch_size",
        "memory_fraction": "--kv_cache_free_gpu_memory_fraction",
        "max_model_len": "--max_seq_len",
        "chunked_prefill": ("--enable_chunked_prefill", ""),
    },
}
#: How a worker of each engine takes its role in a disaggregated deployment, the KV cache crossing through the
#: engine's own connector: vLLM's NixlConnector usage (docs/features/nixl_connector_usage.md, and the proxy of
#: tests/v1/kv_connector/nixl_integration) launches both sides with --kv-transfer-config
#: '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'; SGLang's PD disaggregation (server_args.py
#: disaggregation_mode, its disaggregation tests) each side with --disaggregation-mode prefill|decode, behind its
#: router. TensorRT-LLM's is set in the YAML of trtllm-serve disaggregated.
POOL_ROLES = {
    "vllm": {
        role: ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']
        for role in ("prefill", "decode")
    },
    "sglang": {role: ["--disaggregation-mode", role] for role in ("prefill", "decode")},
}
#: Flags that take no value (the others take one).
BARE_FLAGS = {
    "vllm": {"--enable-expert-parallel"},
    "sglang": {"--enable-dp-attention"},
    "atom": {"--enable-expert-parallel", "--enable-dp-attention"},
}
#: The program each engine is launched by.
PROGRAMS = {
    "vllm": ["vllm", "serve"],
    "sglang": ["python", "-m", "sglang.launch_server"],
    "trtllm": ["trtllm-serve"],
    "atom": ["python", "-m", "atom.entrypoints.openai_server"],
}
#: The flag that names the model, where it is not the program's first argument.
MODEL_FLAGS = {"sglang": "--model-path", "atom": "--model"}
#: The KV dtypes as the engines name them (vLLM's and SGLang's --kv-cache-dtype; ATOM's --kv_cache_dtype takes bf16
#: or fp8).
KV_DTYPES = {"fp8": "fp8_e4m3", "bf16": "auto", "fp16": "auto", "fp32": "auto"}
ENGINE_KV_DTYPES = {"atom": {"fp8": "fp8", "bf16": "bf16"}}


def hub_id(model) -> str:
    """The name an engine loads ``model`` by: its Hugging Face id where a preset or a Hub model has one."""
    return next((a for a in model.aliases if "/" in a), model.id)


def revision_flag(engine_name: str, model) -> list[str]:
    """``--revision REV`` where ``model`` was read at a Hub revision other than main (vLLM's and SGLang's flag;
    trtllm-serve has none: it takes the downloaded folder)."""
    if model.revision is None:
        return []
    if engine_name == "trtllm":
        raise CostModelError(
            f"trtllm-serve takes no --revision: download {hub_id(model)} at {model.revision} "
            "(huggingface-cli download --revision) and pass its folder as --model"
        )
    return [ENGINE_FLAGS[engine_name]["revision"], model.revision]


def launch(
    engine_name: str,
    model_name: str,
    layout: Layout,
    settings: dict,
    defaults: dict,
    kv_dtype: str | None = None,
    quantization: str | None = None,
) -> list[str]:
    """The launch command (argv) of one replica of ``layout`` under ``engine_name`` with ``settings`` (the engine's
    resolved settings, :func:`engine_settings`): every number stated, a switch only where it differs from the
    engine's ``defaults``; ``kv_dtype``: costmodel's name of the cache's dtype where it is not the checkpoint's;
    ``quantization``: weights quantized as the engine loads them (``fp8``), where the checkpoint is not."""
    if engine_name not in ENGINE_FLAGS:
        raise CostModelError(f"no launch command for engine {engine_name!r}; known: {', '.join(ENGINE_FLAGS)}")
    if layout.mode != "agg":
        raise CostModelError("a launch command is one engine's; a disaggregated deployment launches each pool")
    names = ENGINE_FLAGS[engine_name]
    flag = MODEL_FLAGS.get(engine_name)
    argv = [*PROGRAMS[engine_name], *([flag] if flag else []), model_name]
    dp = layout.attention_dp
    tp = layout.tp * dp if engine_name == "sglang" and dp > 1 else layout.tp
    argv += [names["tp"], str(tp)]
    if layout.pipeline_parallel > 1:
        if "pipeline_parallel" not in names:
            raise CostModelError(f"{engine_name} {PROGRAMS[engine_name][-1]} takes no pipeline parallel flag")
        argv += [names["pipeline_parallel"], str(layout.pipeline_parallel)]
    if dp > 1:
        if "attention_dp" not in names:
            raise CostModelError(f"{engine_name}'s attention data parallel is set in its YAML options, not a flag")
        argv += [names["attention_dp"], str(dp)]
        if "dp_attention" in names:
            argv.append(names["dp_attention"])
    if layout.expert_parallel:
        flag = names["expert_parallel"]
        argv += [flag] if flag in BARE_FLAGS.get(engine_name, ()) else [flag, str(tp)]
    for key in ("max_num_batched_tokens", "max_num_seqs", "memory_fraction", "page_size", "max_model_len"):
        value = settings.get(key)
        if value is not None and key in names:
            argv += [names[key], f"{value:g}" if isinstance(value, float) else str(value)]
    if kv_dtype is not None and "kv_dtype" in names:
        kv_names = ENGINE_KV_DTYPES.get(engine_name, KV_DTYPES)
        if kv_dtype not in kv_names and engine_name in ENGINE_KV_DTYPES:
            raise CostModelError(f"{engine_name} keeps its KV cache in {' or '.join(kv_names)}, not {kv_dtype}")
        argv += [names["kv_dtype"], kv_names.get(kv_dtype, kv_dtype)]
    if quantization is not None and "quantization" in names:
        argv += [names["quantization"], quantization]
    for key in ("prefix_caching", "async_scheduling", "chunked_prefill"):
        value, default = settings.get(key), defaults.get(key)
        if key == "prefix_caching" and settings.get("reuse_prefix") != defaults.get("reuse_prefix", True):
            # the switch turned prefix reuse off (on, for ATOM, whose default is off)
            value, default = settings.get("reuse_prefix"), defaults.get("reuse_prefix", True)
        if key in names and value is not None and value != default:
            flag = names[key][0 if value else 1]
            if not flag:
                raise CostModelError(f"{engine_name} has no launch flag that turns {key} {'on' if value else 'off'}")
            argv.append(flag)
    unsaid = [
        k
        for k in ("page_size", "prefix_caching", "async_scheduling")
        if k not in names and settings.get(k) is not None and settings[k] != defaults.get(k)
    ]
    if unsaid:
        raise CostModelError(
            f"{engine_name} takes {', '.join(unsaid)} in its --extra_llm_api_options YAML, not as a launch flag"
        )
    return argv


def parse(argv: list[str]) -> tuple[str, str, Layout, dict, str | None]:
    """(engine, model, layout, settings, kv dtype) a launch command of :func:`launch` states (the model as
    ``ORG/NAME@REVISION`` where the command names a revision)."""
    engine_name = next((e for e, p in PROGRAMS.items() if argv[: len(p)] == p), None)
    if engine_name is None:
        raise CostModelError(f"not a launch command of a known engine: {shlex.join(argv[:3])}")
    rest = argv[len(PROGRAMS[engine_name]) :]
    if engine_name in MODEL_FLAGS:
        model, rest = rest[1], rest[2:]
    else:
        model, rest = rest[0], rest[1:]
    flags = {v: k for k, v in ENGINE_FLAGS[engine_name].items() if isinstance(v, str)}
    toggles = {
        flag: (k, i == 0)
        for k, v in ENGINE_FLAGS[engine_name].items()
        if isinstance(v, tuple)
        for i, flag in enumerate(v)
        if flag
    }
    got: dict = {}
    i = 0
    while i < len(rest):
        flag = rest[i]
        if flag in toggles:
            key, on = toggles[flag]
            got[key] = on
            i += 1
        elif flag in BARE_FLAGS.get(engine_name, ()):
            got[flags[flag]] = True
            i += 1
        elif flag in flags:
            got[flags[flag]] = rest[i + 1]
            i += 2
        else:
            raise CostModelError(f"{flag} is not a flag {engine_name} is launched with here")
    dp = int(got.pop("attention_dp", 1))
    got.pop("dp_attention", None)
    tp = int(got.pop("tp"))
    layout = Layout(
        tp=tp // dp if engine_name == "sglang" else tp,
        attention_dp=dp,
        pipeline_parallel=int(got.pop("pipeline_parallel", 1)),
        expert_parallel="expert_parallel" in got and got.pop("expert_parallel") is not None,
    )
    kv = got.pop("kv_dtype", None)
    named = {v: k for k, v in ENGINE_KV_DTYPES.get(engine_name, KV_DTYPES).items() if v != "auto"}
    kv = named.get(kv, None if kv == "auto" else kv)
    got.pop("quantization", None)
    got.pop("kv_transfer_config", None)  # a disaggregated worker's role (POOL_ROLES)
    got.pop("disaggregation_mode", None)
    revision = got.pop("revision", None)
    model = f"{model}@{revision}" if revision else model
    settings = {
        k: (float(v) if k == "memory_fraction" else int(v)) if isinstance(v, str) else v for k, v in got.items()
    }
    return engine_name, model, layout, settings, kv


def engine_settings(eng) -> dict:
    """The settings of a resolved engine (an EngineConfig or the report's EngineSummary) a launch command states."""
    keys = (
        "max_num_batched_tokens",
        "max_num_seqs",
        "memory_fraction",
        "page_size",
        "chunked_prefill",
        "prefix_caching",
        "async_scheduling",
    )
    out = {k: getattr(eng, k) for k in keys}
    out["max_model_len"] = getattr(eng, "max_model_len", None)
    out["reuse_prefix"] = eng.reuse_prefix
    return out


def flags_of(settings: dict) -> EngineFlags:
    """The EngineFlags that set an engine to ``settings``."""
    return EngineFlags(**{k: v for k, v in settings.items() if k in EngineFlags.__dataclass_fields__})


def bench(
    engine_name: str,
    model_name: str,
    input_len: int,
    output_len: int,
    *,
    concurrency=None,
    request_rate=None,
    num_requests: int | None = None,
) -> list[str]:
    """``vllm bench serve`` against the launched server, with the load the prediction assumed (random prompts of
    fixed lengths; vllm/benchmarks/serve.py and datasets.py's flags)."""
    argv = [
        "vllm",
        "bench",
        "serve",
        "--model",
        model_name,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--random-range-ratio",
        "0",
        "--ignore-eos",
    ]
    if engine_name == "sglang":
        argv += ["--backend", "sglang", "--port", "30000"]
    if concurrency is not None:
        argv += ["--max-concurrency", str(concurrency), "--request-rate", "inf"]
    else:
        argv += ["--request-rate", f"{request_rate:g}"]
    if num_requests is not None:
        argv += ["--num-prompts", str(num_requests)]
    return [*argv, "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99"]


def _precisions(m, name: str, weight_dtype, kv_dtype) -> tuple[str | None, str | None]:
    """(the KV cache's dtype as the engine keeps it, ``fp8`` where the weights are quantized as the engine loads
    them and the checkpoint is not)."""
    from costmodel.engine.served import checkpoint_kv_dtype

    own = m.quantization.weight_dtype if m.quantization is not None else None
    online = "fp8" if weight_dtype == "fp8" and own != "fp8" else None
    return kv_dtype or checkpoint_kv_dtype(m, name, weight_dtype), online


def commands_for(m, hw, layout: Layout, served, flags: EngineFlags, weight_dtype, kv_dtype, share: dict) -> dict:
    """``{"launch", "bench"}``: one replica of ``layout`` launched as prediction ``served`` (a LoadPrediction: its
    resolved engine) assumed it, and the benchmark at that replica's ``share`` of the load (``concurrency`` or
    ``request_rate``, and ``num_requests``)."""
    from dataclasses import replace

    from costmodel.engine.config import engine

    name = served.engine.name
    default = engine(
        name, capacity_bytes=hw.engine_memory, device_name=hw.name, tp=layout.tp, version=flags.engine_version
    )
    settings = engine_settings(served.engine) | {"max_model_len": flags.max_model_len}
    kv, online = _precisions(m, name, weight_dtype, kv_dtype)
    argv = launch(name, hub_id(m), replace(layout, replicas=1), settings, engine_settings(default), kv, online)
    argv += revision_flag(name, m)
    measure = bench(name, hub_id(m), round(served.input_len), round(served.output_len), **share)
    return {"launch": shlex.join(argv), "bench": shlex.join(measure)}


def pool_commands(m, hw, served, prefill, decode, flags: EngineFlags, weight_dtype, kv_dtype) -> dict:
    """``{"launch", "bench"}`` of a disaggregated deployment ``served`` (a DisaggPrediction of ``prefill`` and
    ``decode`` Pools on ``hw``): each pool's worker command, one line each, with its role (:data:`POOL_ROLES`), and
    the benchmark at the whole load through the router."""
    from dataclasses import replace

    from costmodel.deploy.disagg import pool_engine
    from costmodel.deploy.pools import Pool

    name = served.engine
    if name not in POOL_ROLES:
        raise CostModelError(f"{name}'s disaggregated serving is set up in its YAML, not with launch flags")
    kv, online = _precisions(m, name, weight_dtype, kv_dtype)
    lines = []
    for role, pool in (("prefill", prefill), ("decode", decode)):
        bare = replace(flags, max_num_batched_tokens=None, max_num_seqs=None)
        default = pool_engine(name, pool.gpu or hw, Pool(tp=pool.tp), bare, prefill=role == "prefill")
        resolved = pool_engine(name, pool.gpu or hw, pool, flags, prefill=role == "prefill")
        unit = Layout(tp=pool.tp, expert_parallel=pool.expert_parallel, attention_dp=pool.attention_dp)
        argv = launch(name, hub_id(m), unit, engine_settings(resolved), engine_settings(default), kv, online)
        argv += revision_flag(name, m) + POOL_ROLES[name][role]
        lines.append(f"{role} (each of {pool.workers}): {shlex.join(argv)}")
    share = dict(request_rate=served.request_rate) if served.request_rate else dict(concurrency=served.concurrency)
    measure = bench(
        name, hub_id(m), round(served.input_len), round(served.output_len), **share, num_requests=served.num_requests
    )
    return {"launch": "\n".join(lines), "bench": shlex.join(measure)}
