"""How each launcher started the measured engines: the profiles of the systems, the checkpoints of each precision, Dynamo's and InferenceX's engine settings (token budgets, memory fractions, recipes)."""

from __future__ import annotations

import re

from costmodel.core.errors import CostModelError


def profile_of(system: str) -> str | None:
    """The profile id of a row's system id, found among the profiles' ids and aliases as a published table's is
    (``b200_sxm`` -> ``b200``, ``a100_sxm`` -> ``a100_80gb_sxm``); None if no profile names it."""
    from costmodel.validation.published import profile_for_system

    try:
        return profile_for_system(system)
    except CostModelError:
        return None


#: Weight dtype for each precision the rows name ("" is the checkpoint's own; fp4: see :data:`MXFP4_CHECKPOINTS`),
#: aiconfigurator's quant-mode names among them (aiconfigurator_core common.py GEMMQuantMode and MoEQuantMode) where
#: their math is one modelled: int4_wo (W4A16) as int4, sq (W8A8 int8) as int8, the fp8 variants as fp8, the MXFP4
#: experts as mxfp4 (their activations the engine's: costmodel.engine.config). int8_wo (W8A16) and w4afp8 (int4 weights,
#: fp8 math) are not.
PRECISIONS = {
    "": None,
    "bf16": None,
    "fp16": None,
    "bfloat16": None,
    "float16": None,
    "fp8": "fp8",
    "fp8_static": "fp8",
    "fp8_ootb": "fp8",
    "fp8_block": "fp8_block",
    "sq": "int8",
    "int4_wo": "int4",
    "fp4": "nvfp4",
    "nvfp4": "nvfp4",
    "mxfp4": "mxfp4",
    "w4a16_mxfp4": "mxfp4",
    "w4a8_mxfp4_mxfp8": "mxfp4",
    "w4a8_mxfp4_mxfp8_trtllm": "mxfp4",
}


#: The activations an MXFP4 mode names (costmodel.core.vocab.MXFP4_ACTIVATIONS); other MXFP4 rows take the engine's.
MXFP4_MODES = {"w4a16_mxfp4": "bf16", "w4a8_mxfp4_mxfp8": "mxfp8", "w4a8_mxfp4_mxfp8_trtllm": "mxfp8"}


#: Vendors' quantized checkpoints of a published model keep its shape: such a row is priced as the model its name
#: carries, at the precision the row records. NVIDIA's: nvidia/<model>-NVFP4, -FP4 or -FP8, a -v2 revision; AMD's
#: (Quark): amd/<model>-MXFP4 or -FP8, -KV where the cache is FP8 too, -Preview (amd/DeepSeek-R1-0528-MXFP4-Preview,
#: as InferenceX's MI355X recipes and ATOM's serve it, its linear layers MXFP4: an FP4 row, at the fp4 peak).
QUANTIZED_CHECKPOINTS = (
    re.compile(r"^nvidia/(?P<model>.+?)-(NVFP4|FP4|FP8)(-v\d+)?$", re.IGNORECASE),
    re.compile(r"^amd/(?P<model>.+?)-(MXFP4|FP8)(-KV)?(-Preview)?$", re.IGNORECASE),
)


def checkpoint_model(path: str):
    """(the preset of a row's ``model_path``, the name it is priced under where that is not the path): the path
    itself, or the model a vendor's quantized checkpoint's name carries (:data:`QUANTIZED_CHECKPOINTS`);
    CostModelError where neither is known."""
    from costmodel.model.presets import load_model

    try:
        return load_model(path), None
    except CostModelError:
        m = next((m for c in QUANTIZED_CHECKPOINTS if (m := c.match(path.strip()))), None)
        if m is None:
            raise
        preset = load_model(m["model"])
        return preset, preset.id


#: Checkpoints published in MXFP4 (gpt-oss: its experts; openai/gpt-oss-120b config.json quantization_config
#: quant_method mxfp4); FP4 rows of any other model are NVFP4 (an FP8 scale per 16 weights: NVIDIA's FP4
#: checkpoints), at the fp4 peak where the device has one and dequantized where not.
MXFP4_CHECKPOINTS = ("openai/gpt-oss-120b", "openai/gpt-oss-20b")


#: The token budget of a vLLM engine that Dynamo's worker starts, taken as vLLM's scheduler default (2048), not the
#: OpenAI server's (8192 on a GPU of 70 GB or more). ai-dynamo/aiconfigurator fpm_golden_runs/*/vllm_metadata.json
#: report no max_num_batched_tokens requested and 2048 in the effective config (vLLM 0.20.1 under Dynamo 1.2.0), but
#: the same runs' iteration records reach 8192 tokens (benchmarks/fpm_iterations.py), so the source does not settle
#: it: 2048 is kept because the rows predicted with it are closer (docs/serving.md), a choice made on the rows. The
#: rows themselves bound it from below where the budget binds: Qwen3-32B at 128 clients of 4,096 + 128 tokens on 4
#: and 8 H100s decodes about 120 requests at once by Little's law on its means (benchmarks/serving_in_flight.py),
#: where a 2,048-token budget admits at most 1,920 / 4,096 x 127 = 60; with 8,192 those two rows come out right
#: and the rows of 1,024-token prompts at 8-64 clients two to three times high (docs/serving.md).
DYNAMO_VLLM_TOKENS = 2048


#: The token budget aiconfigurator's generator gives a TensorRT-LLM engine it deploys in one pool (agg):
#: ``max_num_tokens = max_batch_size + isl + 1500``, rounded up to whole KV blocks of ``tokens_per_block`` (32);
#: room for one prompt of the benchmark's length beside the whole batch's decode tokens (ai-dynamo/aiconfigurator
#: generator/rule_plugin/trtllm.rule and rule_plugin/benchmark/trtllm.rule, written into the engine's
#: extra_engine_args by backend_templates/trtllm/extra_engine_args.*.yaml.j2). Its vLLM template passes no
#: budget (DYNAMO_VLLM_TOKENS above).
DYNAMO_TRTLLM_SLACK_TOKENS = 1500


TRTLLM_BLOCK_TOKENS = 32


#: The KV cache's share of free memory in the TensorRT-LLM engines aiconfigurator's generator deploys:
#: ``kv_cache_config.free_gpu_memory_fraction`` defaults to 0.80 in its extra_engine_args templates
#: (generator/config/backend_templates/trtllm/extra_engine_args.1.0.0.yaml.j2 and later), where TensorRT-LLM's own
#: default is 0.9 (costmodel.engine.config). The rows agree: Qwen3-32B (FP8) on one H100 queues as if its cache held
#: 261k-274k tokens (Little's law on the four rows whose cache binds), below the 0.9 default's 348k and the 0.80's
#: 309k (costmodel.engine.served.Setup.kv_tokens).
DYNAMO_TRTLLM_KV_FRACTION = 0.80


#: Engines whose mixture-of-experts layers, under attention data parallel with no expert parallel asked for, shard
#: every expert's width over all the groups' devices: vLLM ("By default, expert layers form a tensor parallel group
#: of size DP x TP. To use expert parallelism instead, include the --enable-expert-parallel CLI arg":
#: docs/serving/data_parallel_deployment.md, v0.12). A row of such an engine with attention data parallel and no
#: MoE sizes recorded runs that way.
EXPERTS_SHARDED_OVER_DP = ("vllm",)


#: The workers per pool of a disaggregated row that records none, per engine: SGLang's own deployment of a model
#: too large for one node (docs/advanced_features/pd_disaggregation.md, "DeepSeek Multi-Node": one prefill server and
#: one decode server, each of --tp-size 16 over two nodes). Such a row is predicted with the count said in its
#: ``assumed``. Other engines' rows without counts are refused: the file's TensorRT-LLM ones repeat measurements that
#: it also records, with their layouts, as DeepSeek-V3 rows of one prefill worker and two or three decode workers.
UNRECORDED_WORKERS = {"sglang": 1}


#: The dated exports of the silicon sample (``source_file=2026-03-25.csv``, ...) are InferenceX's runs
#: (SemiAnalysisAI/InferenceX): their models, engines, images and tensor-parallel sizes are its recipes' (a Llama-70B
#: FP8 on 2, 4 and 8 H100s under vLLM's image: .github/workflows/70b-tmpl.yml, tp-list [2, 4, 8]). Its client is its
#: copy of vLLM's benchmark_serving.py (utils/bench_serving/benchmark_serving.py), run by benchmarks/benchmark_lib.sh
#: run_benchmark_serving: 10 x CONC prompts, --max-concurrency CONC, request rate inf, --ignore-eos, the warm-up
#: requests gathered before the measured ones start, and --random-range-ratio RANDOM_RANGE_RATIO (0.8:
#: .github/workflows/benchmark-tmpl.yml), which draws every prompt's and every output's length uniformly from
#: int(0.8 x len) to len (``sample_uniform``): ``--length-dist range --spread 0.2``. The server is the engine's own
#: (vllm serve, sglang's launch_server): ``--frontend engine``.
INFERENCEX_SPREAD = 0.2


#: Each InferenceX recipe's engine settings that differ from the engine's defaults, by engine and model:
#: benchmarks/70b_fp8_h100_slurm.sh (kv-cache-dtype fp8, async-scheduling, no-enable-prefix-caching,
#: max-num-batched-tokens 8192), benchmarks/gptoss_fp4_h100_slurm.sh (async-scheduling, no-enable-prefix-caching,
#: max-num-batched-tokens 8192, VLLM_MXFP4_USE_MARLIN), benchmarks/single_node/fixed_seq_len/minimaxm2.5_fp8_h100.sh
#: (no-enable-prefix-caching, the budget vLLM's default; one server of --tensor-parallel-size TP with
#: --enable-expert-parallel, no data-parallel attention: ``attention_dp`` 1. The 2026-04-06 export records those runs as
#: 4 attention data parallel groups with experts over 16 devices and a quarter of the clients each, where the 2026-03-25
#: export records the same configurations' runs, measured alike (TTFT within 7% and TPOT within 1.5% at 12 of 15), as one
#: server of 4 with expert parallel: such a row is predicted as its recipe runs, and says so in ``assumed``).
INFERENCEX_RECIPES = {
    ("vllm", "meta-llama/Llama-3.1-70B"): {
        "max_num_batched_tokens": 8192,
        "kv_dtype": "fp8",
        "async_scheduling": True,
        "prefix_caching": False,
    },
    ("vllm", "openai/gpt-oss-120b"): {
        "max_num_batched_tokens": 8192,
        "async_scheduling": True,
        "prefix_caching": False,
    },
    ("vllm", "MiniMaxAI/MiniMax-M2.5"): {"prefix_caching": False, "attention_dp": 1},
}


#: InferenceX's DeepSeek-R1 recipes (the -0528 checkpoint, and AMD's MXFP4 one), by engine and GPU: the settings
#: each gives the engine that differ from its defaults, as SemiAnalysisAI/InferenceX benchmarks/dsr1_*.sh @1fc5d73
#: (single_node/dsr1_fp8_b300.sh @5632483: the B200's, "reused as-is") launch it. SGLang: --chunked-prefill-size and
#: --max-prefill-tokens (one budget here), --mem-fraction-static, --kv-cache-dtype fp8_e4m3 where set,
#: --disable-radix-cache; TensorRT-LLM on the H200 (dsr1_fp8_h200_trt.sh): max_num_tokens the larger of 8192 and
#: CONC + ISL + 64 rounded up to 64, free_gpu_memory_fraction 0.75, an fp8 cache, enable_block_reuse false; ATOM on
#: the MI355X (dsr1_*_mi355x_atom.sh): --kv_cache_dtype fp8, --block-size 16. What they set that is not modelled
#: (--num-continuous-decode-steps 4 on AMD, --cuda-graph-max-bs 128, --scheduler-recv-interval, torch.compile) is
#: left out.
DSR1_RECIPES = {
    ("sglang", "h200_sxm"): {"max_num_batched_tokens": 32768, "memory_fraction": 0.82, "prefix_caching": False},
    ("sglang", "b200"): {
        "max_num_batched_tokens": 32768,
        "memory_fraction": 0.82,
        "kv_dtype": "fp8",
        "prefix_caching": False,
    },
    ("sglang", "mi300x"): {
        "max_num_batched_tokens": 131072,
        "memory_fraction": 0.8,
        "kv_dtype": "fp8",
        "prefix_caching": False,
    },
    ("sglang", "mi355x"): {"max_num_batched_tokens": 196608, "memory_fraction": 0.8, "prefix_caching": False},
    ("trtllm", "h200_sxm"): {"memory_fraction": 0.75, "kv_dtype": "fp8", "prefix_caching": False},
    ("atom", "mi355x"): {"kv_dtype": "fp8"},
}
DSR1_RECIPES[("sglang", "b300")] = DSR1_RECIPES[("sglang", "b200")]
DSR1_RECIPES[("sglang", "mi325x")] = DSR1_RECIPES[("sglang", "mi300x")]


def inferencex_recipe(row: dict, preset_id: str, isl: int, osl: int, conc: int, tp: int | None) -> dict:
    """The engine settings of the InferenceX recipe a row ran: :data:`INFERENCEX_RECIPES` by engine and model,
    else a DeepSeek-R1 recipe by engine and GPU (:data:`DSR1_RECIPES`, with each script's own conditions); {}
    for a row that is not one of InferenceX's runs."""
    if not inferencex_run(row):
        return {}
    backend = row["backend"]
    if (backend, row["model_path"]) in INFERENCEX_RECIPES:
        return INFERENCEX_RECIPES[(backend, row["model_path"])]
    gpu = profile_of(row["system"])
    if preset_id != "deepseek_v3" or "r1" not in row["model_path"].lower() or (backend, gpu) not in DSR1_RECIPES:
        return {}
    recipe = dict(DSR1_RECIPES[(backend, gpu)])
    fp4 = "mxfp4" in row["model_path"].lower()
    if backend == "sglang" and gpu in ("b200", "b300") and tp == 4:
        recipe |= {"max_num_batched_tokens": 8192, "memory_fraction": 0.95}
    if backend == "sglang" and gpu == "mi355x" and fp4:
        recipe["kv_dtype"] = "fp8"  # dsr1_fp4_mi355x.sh sets it; dsr1_fp8_mi355x.sh does not
        if (isl, osl) == (8192, 1024) and conc > 32:
            recipe["max_num_batched_tokens"] = 32768
    if backend == "trtllm":
        recipe["max_num_batched_tokens"] = max(8192, -(-(conc + isl + 64) // 64) * 64)
    return recipe


def inferencex_run(row: dict) -> bool:
    """Whether a row is one of InferenceX's runs: a dated export of the silicon sample (:data:`INFERENCEX_SPREAD`)."""
    return re.search(r"source_file=\d{4}-\d{2}-\d{2}\.csv", row.get("silicon_data_source") or "") is not None


def dynamo_budget(backend: str, batch: int, isl: int) -> int | None:
    """The tokens per iteration of an engine that aiconfigurator's generator starts under Dynamo (None: the
    engine's own default)."""
    if backend == "vllm":
        return DYNAMO_VLLM_TOKENS
    if backend == "trtllm":
        return -(-(batch + isl + DYNAMO_TRTLLM_SLACK_TOKENS) // TRTLLM_BLOCK_TOKENS) * TRTLLM_BLOCK_TOKENS
    return None


def launched_by_dynamo(row: dict) -> bool:
    """Whether a row's engine ran under Dynamo's worker: its container image is a Dynamo runtime, or no image is
    recorded and the row is not one of InferenceX's runs (the rows of aiconfigurator's own collection, which deploys
    through Dynamo: tools/automation/); an engine's own image (vllm/vllm-openai, lmsysorg/sglang) is its own server,
    and so is an InferenceX run that records none (its recipes start the engine's own server)."""
    image = re.search(r"image=([^;]+)", row.get("silicon_data_source") or "")
    if image is None:
        return not inferencex_run(row)
    return "ai-dynamo" in image.group(1)
