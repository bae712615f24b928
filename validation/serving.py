"""Measured deployments against predictions: every row of a file in the layout of NVIDIA aiconfigurator's silicon
sample (``silicon_sample.csv``: one served model at a fixed concurrency, with mean TTFT and TPOT measured by
the benchmark client) that costmodel can express is predicted with :func:`costmodel.engine.served.serve` (or
:func:`costmodel.deploy.disagg.serve_disaggregated`); every other row is counted under the reason it cannot be.

A row's prediction is the closed loop of ``silicon_concurrency`` clients (the ``batch_size`` times the attention
data parallel groups where the source names none; a whole multiple of that is as many replicas behind a router,
each with an even share of the clients) on ``tp_size`` devices of the row's system under its engine (``backend``), with max_num_seqs set to
``batch_size``, its pipeline stages, attention data parallel groups and expert-parallel layout (over the
tensor-parallel group, over every group's devices, or in groups that shard their experts), the token budget per
iteration that the row's launcher gives the engine (:func:`dynamo_budget` for engines that aiconfigurator's
generator starts under Dynamo, the engine's own default otherwise), the weights and GEMMs in the row's precision,
and the KV cache in the engine's default for the checkpoint. A disaggregated row is its two pools, each of its
workers, size and batch. A row of InferenceX's runs (:func:`inferencex_run`) is its recipe's engine settings
(:data:`INFERENCEX_RECIPES`) behind the engine's own server, its lengths drawn as its client draws them.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from costmodel.core.errors import CostModelError
from costmodel.engine.config import default_kv_dtype

#: Columns a deployments file must have.
COLUMNS = (
    "id",
    "silicon_data_source",
    "backend",
    "model_path",
    "system",
    "precision",
    "mode",
    "isl",
    "osl",
    "gemm_quant_mode",
    "moe_quant_mode",
    "batch_size",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
)


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
#: NVIDIA's quantized checkpoints of a published model (nvidia/<model>-NVFP4, -FP4 or -FP8, a -v2 revision) keep
#: its shape: such a row is priced as the model its name carries, at the precision the row records.
QUANTIZED_CHECKPOINT = re.compile(r"^nvidia/(?P<model>.+?)-(NVFP4|FP4|FP8)(-v\d+)?$", re.IGNORECASE)


def checkpoint_model(path: str):
    """(the preset of a row's ``model_path``, the name it is priced under where that is not the path): the path
    itself, or the model an NVIDIA quantized checkpoint's name carries (:data:`QUANTIZED_CHECKPOINT`);
    CostModelError where neither is known."""
    from costmodel.model.presets import load_model

    try:
        return load_model(path), None
    except CostModelError:
        m = QUANTIZED_CHECKPOINT.match(path.strip())
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


@dataclass(frozen=True)
class Stage:
    """A row's layout: of its one engine (an aggregated row) or of one pool of a disaggregated row (with its
    workers); the tensor-parallel size and batch (None: the engine's default), experts spread over the tp devices
    or sharded, attention data parallel groups, pipeline stages, expert-parallel groups within tp."""

    tp: int
    workers: int
    batch: int | None
    expert_parallel: bool
    attention_dp: int = 1
    pipeline_parallel: int = 1
    expert_parallel_size: int = 0  # expert-parallel groups within tp, each sharding its experts (0: none)
    replicas: int = 1  # aggregated: copies of the engine behind a router, the clients shared evenly

    def flags(self, role: str) -> list[str]:
        out = [f"--{role}-tp", str(self.tp), f"--{role}-workers", str(self.workers)]
        if self.batch is not None:
            out += [f"--{role}-max-num-seqs", str(self.batch)]
        out += [f"--{role}-expert-parallel"] if self.expert_parallel else []
        return out + ([f"--{role}-attention-dp", str(self.attention_dp)] if self.attention_dp > 1 else [])

    def parallel_flags(self) -> list[str]:
        """The ``costmodel predict`` flags of an aggregated row's parallel layout beyond its tp."""
        out = []
        if self.expert_parallel:
            out += ["--expert-parallel"]
        if self.attention_dp > 1:
            out += ["--attention-dp", str(self.attention_dp)]
        if self.pipeline_parallel > 1:
            out += ["--pipeline-parallel-size", str(self.pipeline_parallel)]
        if self.expert_parallel_size:
            out += ["--expert-parallel-size", str(self.expert_parallel_size)]
        if self.replicas > 1:
            out += ["--replicas", str(self.replicas)]
        return out

    def layout(self):
        """An aggregated row's :class:`costmodel.engine.layout.Layout`."""
        from costmodel.engine.layout import Layout

        return Layout(
            tp=self.tp,
            expert_parallel=self.expert_parallel,
            attention_dp=self.attention_dp,
            pipeline_parallel=self.pipeline_parallel,
            expert_parallel_size=self.expert_parallel_size or None,
            replicas=self.replicas,
        )

    def pool(self):
        from costmodel.deploy.disagg import Pool

        return Pool(
            tp=self.tp,
            workers=self.workers,
            max_num_seqs=self.batch,
            expert_parallel=self.expert_parallel,
            attention_dp=self.attention_dp,
        )


@dataclass(frozen=True)
class Deployment:
    id: str
    system: str
    backend: str
    model_path: str
    mode: str
    isl: int
    osl: int
    concurrency: int
    weight_dtype: str | None
    kv_dtype: str | None
    ttft_s: float
    tpot_s: float
    layout: Stage | None = None  # aggregated: the engine's layout
    max_num_batched_tokens: int | None = None  # where the launcher sets it (vLLM, TensorRT-LLM under Dynamo)
    memory_fraction: float | None = None  # the KV cache's memory fraction, where the launcher sets it
    prefill: Stage | None = None  # disaggregated: the two pools
    decode: Stage | None = None
    model: str | None = None  # the preset priced where it is not model_path (NVIDIA's quantized checkpoints)
    mxfp4_activations: str | None = None  # where the row's MoE quant mode names them
    assumed: tuple[str, ...] = ()  # what the prediction takes that the row does not record
    frontend: str = "dynamo"  # the front end its requests passed (costmodel.engine.served.FRONTENDS)
    spread: float = 0.0  # lengths drawn below the row's by up to this share (InferenceX's client), else fixed
    async_scheduling: bool | None = None  # where the launcher sets it
    prefix_caching: bool | None = None

    @property
    def model_name(self) -> str:
        return self.model or self.model_path

    def command(self) -> list[str]:
        cmd = [
            "predict",
            "--gpu",
            profile_of(self.system),
            "--model",
            self.model_name,
            "--engine",
            self.backend,
            "--concurrency",
            str(self.concurrency),
            "--input-len",
            str(self.isl),
            "--output-len",
            str(self.osl),
        ]
        if self.prefill is not None:
            cmd += ["--disaggregated", *self.prefill.flags("prefill"), *self.decode.flags("decode")]
        else:
            cmd += ["--tp", str(self.layout.tp), "--max-num-seqs", str(self.layout.batch)]
        if self.weight_dtype:
            cmd += ["--weight-dtype", self.weight_dtype]
        if self.kv_dtype:
            cmd += ["--kv-dtype", self.kv_dtype]
        if self.layout is not None:
            cmd += self.layout.parallel_flags()
        if self.max_num_batched_tokens:
            cmd += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if self.memory_fraction is not None:
            cmd += ["--free-gpu-memory-fraction", f"{self.memory_fraction:g}"]
        if self.mxfp4_activations:
            cmd += ["--mxfp4-activations", self.mxfp4_activations]
        if self.async_scheduling is not None:
            cmd += ["--async-scheduling" if self.async_scheduling else "--no-async-scheduling"]
        if self.prefix_caching is not None:
            cmd += ["--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching"]
        if self.spread:
            cmd += ["--length-dist", "range", "--spread", f"{self.spread:g}"]
        if self.frontend != "dynamo":
            cmd += ["--frontend", self.frontend]
        return cmd


def _num(row: dict, key: str) -> float | None:
    v = (row.get(key) or "").strip()
    if not v:
        return None
    try:
        x = float(v)
    except ValueError:
        raise ValueError(f"{key} {v!r} is not a number") from None
    if not math.isfinite(x):
        raise ValueError(f"{key} {v!r} is not finite")
    return x


def _whole(row: dict, key: str, default: int | None = None) -> int | None:
    x = _num(row, key)
    if x is None:
        return default
    if x != int(x) or x < 0:
        raise ValueError(f"{key} {row[key]!r} is not a whole number")
    return int(x)


def parse(row: dict) -> Deployment | str:
    """A row as a deployment, or the reason it cannot be predicted."""
    try:
        if row["mode"] not in ("agg", "disagg"):
            return f"mode {row['mode']!r}"
        if profile_of(row["system"]) is None:
            return f"unknown system {row['system']}"
        precision = (row["precision"] or "").strip()
        quant = {(row["gemm_quant_mode"] or "").strip(), (row["moe_quant_mode"] or "").strip()} - {""}
        fp4 = precision in ("fp4", "nvfp4", "mxfp4") or bool(quant & {"nvfp4", "mxfp4", "fp4"})
        mxfp4 = fp4 and row["model_path"] in MXFP4_CHECKPOINTS
        if precision not in PRECISIONS or quant - set(PRECISIONS):  # noqa: SIM102
            return f"precision {precision or '/'.join(sorted(quant))}"
        stages = {}
        for role in ("prefill", "decode") if row["mode"] == "disagg" else ("",):
            stage = _stage(row, role + "_" if role else "")
            if isinstance(stage, str):
                return stage
            stages[role] = stage
        isl, osl = _whole(row, "isl"), _whole(row, "osl")
        ttft, tpot = _num(row, "silicon_ttft_ms"), _num(row, "silicon_tpot_ms")
        if None in (isl, osl, ttft, tpot) or not isl or not osl or ttft <= 0 or tpot <= 0:
            return "bad numbers"
        m = re.search(r"silicon_concurrency=(\d+)", row.get("silicon_data_source") or "")
        if "" in stages:
            batch, dp = stages[""].batch, stages[""].attention_dp
            conc = int(m.group(1)) if m else (batch * dp if batch else None)
            if not conc or not batch:
                return "no concurrency"
            if conc > batch * dp and conc % (batch * dp):
                return "more clients than the batch, not a whole number of replicas"
            if conc > batch * dp:  # more clients than the engine's batch: that many replicas share them evenly
                stages[""] = replace(stages[""], replicas=conc // (batch * dp))
            if conc % dp:
                return "clients not an even share per attention-data-parallel group"
        else:  # disaggregated: the clients are the load; each pool's batch limit is its workers'
            if not m:
                return "no concurrency"
            conc = int(m.group(1))
        try:
            preset, priced_as = checkpoint_model(row["model_path"])
        except CostModelError:
            return "unknown model"
        if preset.moe is None and any(st.attention_dp > 1 for st in stages.values()):
            return "attention data parallel on a dense model"
    except ValueError:
        return "bad numbers"
    checkpoint = preset.quantization
    # a mixture of experts' weights are mostly its experts': their mode where the row gives one, else the GEMMs'
    mode = ((row["moe_quant_mode"] if preset.moe is not None else "") or row["gemm_quant_mode"] or "").strip()
    weight = "mxfp4" if mxfp4 else PRECISIONS[mode] if mode else PRECISIONS[precision]
    if weight == "fp8" and checkpoint is not None and checkpoint.weight_dtype == "fp8_block":
        weight = "fp8_block"  # an engine serves a block-scaled FP8 checkpoint with its own scales
    ix, dynamo = inferencex_run(row), launched_by_dynamo(row)
    recipe = INFERENCEX_RECIPES.get((row["backend"], row["model_path"]), {}) if ix else {}
    common = (
        row["id"],
        row["system"],
        row["backend"],
        row["model_path"],
        row["mode"],
        isl,
        osl,
        conc,
        weight,
        recipe.get("kv_dtype") or default_kv_dtype(row["backend"], weight),
        ttft / 1e3,
        tpot / 1e3,
    )
    named = dict(
        model=priced_as,
        mxfp4_activations=MXFP4_MODES.get(mode),
        assumed=tuple(
            f"{role} workers {s.workers}: the row records none ({row['backend']}'s own deployment)"
            for role, s in stages.items()
            if role and not _whole(row, role + "_num_workers")
        ),
        frontend="dynamo" if dynamo else "engine",
        spread=INFERENCEX_SPREAD if ix else 0.0,
    )
    if "" in stages and recipe.get("attention_dp") == 1 and stages[""].attention_dp > 1:
        st = stages[""]
        stages[""] = replace(st, attention_dp=1, batch=st.batch * st.attention_dp)
        named["assumed"] += (
            f"layout: its recipe's, one server of {st.tp} devices with expert parallel, not the "
            f"recorded {st.attention_dp} attention data parallel groups (another export of the same "
            "runs records the recipe's)",
        )
    if "" in stages:
        tokens = recipe.get("max_num_batched_tokens") or (dynamo_budget(row["backend"], batch, isl) if dynamo else None)
        fraction = DYNAMO_TRTLLM_KV_FRACTION if dynamo and row["backend"] == "trtllm" else None
        return Deployment(
            *common,
            layout=stages[""],
            max_num_batched_tokens=tokens,
            memory_fraction=fraction,
            async_scheduling=recipe.get("async_scheduling"),
            prefix_caching=recipe.get("prefix_caching"),
            **named,
        )
    return Deployment(*common, prefill=stages["prefill"], decode=stages["decode"], **named)


def _stage(row: dict, prefix: str) -> Stage | str:
    """A row's layout of one pool (``prefix`` "" for an aggregated row, "prefill_" or "decode_"), or the reason
    it cannot be expressed. A disaggregated row that records no worker counts takes its engine's own deployment
    where one is sourced (:data:`UNRECORDED_WORKERS`) and is refused otherwise."""
    pp = _whole(row, prefix + "pp_size", 1) or 1
    if pp > 1 and prefix:
        return "pipeline parallel in a disaggregated pool"
    dp = _whole(row, prefix + "attention_dp_size", 1) or 1
    tp = _whole(row, prefix + "tp_size", 1) or 1
    ep = _whole(row, prefix + "moe_ep_size", 1) or 1
    moe_tp = _whole(row, prefix + "moe_tp_size", 1) or 1
    over_all = ep == dp * tp and moe_tp == 1  # whole experts over every group's devices: modelled
    unrecorded = not _whole(row, prefix + "moe_ep_size") and not _whole(row, prefix + "moe_tp_size")
    sharded_all = ep == 1 and (moe_tp == dp * tp or (unrecorded and row["backend"] in EXPERTS_SHARDED_OVER_DP))
    if dp > 1 and not over_all and not sharded_all:  # sharded_all: every expert's width over every group's devices
        return "attention data parallel without expert parallel over all its devices"
    hybrid = dp == 1 and 1 < ep < tp and ep * moe_tp == tp  # expert-parallel groups sharding their experts
    if ep > 1 and not over_all and not hybrid:  # else: over the tensor-parallel group(s)
        return "expert parallel across other groups"
    workers = (_whole(row, prefix + "num_workers") or UNRECORDED_WORKERS.get(row["backend"])) if prefix else 1
    if not workers:
        return "disaggregated without worker counts"
    return Stage(tp, workers, _whole(row, prefix + "batch_size"), ep > 1 and not hybrid, dp, pp, ep if hybrid else 0)


#: The largest deployments file read (NVIDIA's H100 sample is 0.3 MB).
MAX_DEPLOYMENTS_BYTES = 64 << 20


def read(path: str | Path) -> tuple[list[Deployment], list[dict]]:
    """The file's deployments and its skipped rows (``id``, ``reason``)."""
    from costmodel.core.files import read_csv

    columns, table = read_csv(str(path), "deployments file", MAX_DEPLOYMENTS_BYTES)
    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        raise CostModelError(
            f"deployments file {str(path)!r} lacks the column(s) {', '.join(missing)} "
            "(the layout of aiconfigurator's silicon_sample.csv)"
        )
    rows, skipped = [], []
    for i, row in enumerate(table):
        got = parse(row)
        if isinstance(got, str):
            skipped.append({"id": row.get("id") or f"row {i + 2}", "reason": got})
        else:
            rows.append(got)
    return rows, skipped


#: How a row's benchmark is run: aiconfigurator's benchmark template (generator/config/backend_templates/
#: benchmark/bench_run.sh.j2) runs aiperf with 2 warm-up requests and 50 measured ones per client.
AIPERF_ROUNDS = {"warmup": 2, "measured": 50}


def predict(d: Deployment, overheads: dict | None = None, evaluator: str = "simulation", protocol: str = "plain"):
    from costmodel.engine.config import EngineFlags
    from costmodel.engine.load import Load
    from costmodel.engine.served import serve
    from costmodel.hardware.catalog import load_profile
    from costmodel.model.presets import load_model

    rounds = (
        {
            "warmup_requests": AIPERF_ROUNDS["warmup"] * d.concurrency,
            "num_requests": AIPERF_ROUNDS["measured"] * d.concurrency,
        }
        if protocol == "aiperf"
        else {}
    )
    drawn = dict(input_dist="range", output_dist="range", spread=d.spread) if d.spread else {}
    load = Load(d.isl, d.osl, concurrency=d.concurrency, **drawn, **rounds)
    common = dict(
        engine_name=d.backend,
        weight_dtype=d.weight_dtype,
        kv_dtype=d.kv_dtype,
        overheads=overheads,
        evaluator=evaluator,
        frontend=d.frontend,
    )
    m, hw = load_model(d.model_name), load_profile(profile_of(d.system))
    if d.prefill is not None:
        from costmodel.deploy.disagg import serve_disaggregated

        flags = EngineFlags(mxfp4_activations=d.mxfp4_activations)
        return serve_disaggregated(m, hw, load, prefill=d.prefill.pool(), decode=d.decode.pool(), flags=flags, **common)
    flags = EngineFlags(
        max_num_seqs=d.layout.batch,
        mxfp4_activations=d.mxfp4_activations,
        max_num_batched_tokens=d.max_num_batched_tokens,
        memory_fraction=d.memory_fraction,
        async_scheduling=d.async_scheduling,
        prefix_caching=d.prefix_caching,
    )
    return serve(m, hw, load, layout=d.layout.layout(), flags=flags, **common)


def decoding_requests(clients: int, ttft_s: float, tpot_s: float, output_len: int) -> float:
    """Requests decoding at once, on average, in a closed loop of ``clients`` whose requests wait ``ttft_s`` for
    their first token and ``tpot_s`` for each after it, from those means alone (Little's law: the loop completes
    clients / (TTFT + decode time) requests a second, each decoding for (output_len - 1) x TPOT). A deployment whose
    engine ran its clients' requests all at once gives about its clients (less their share of time before the first
    token); one that held requests back, in the engine's queue or before it, gives fewer."""
    decode = (output_len - 1) * tpot_s
    return clients * decode / (ttft_s + decode)


def summary(rows: list[dict]) -> list[dict]:
    """Per system x engine x model x mode, per mode and over all rows: n, median and p90 |error| of TTFT and
    TPOT, median measured/predicted."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["system"], r["backend"], r["model_path"], r["mode"])].append(r)
    modes = sorted({r["mode"] for r in rows})
    if len(modes) > 1:
        for mode in modes:
            groups[("all", "all", "all", mode)] = [r for r in rows if r["mode"] == mode]
    groups[("all", "all", "all", "all")] = rows
    out = []
    for (system, backend, model, mode), rs in groups.items():
        if not rs:
            continue
        ttft = np.array([abs(r["predicted_ttft_s"] / r["measured_ttft_s"] - 1) for r in rs])
        tpot = np.array([abs(r["predicted_tpot_s"] / r["measured_tpot_s"] - 1) for r in rs])
        out.append(
            {
                "system": system,
                "backend": backend,
                "model_path": model,
                "mode": mode,
                "n": len(rs),
                "ttft_median_error": float(np.median(ttft)),
                "ttft_p90_error": float(np.percentile(ttft, 90)),
                "tpot_median_error": float(np.median(tpot)),
                "tpot_p90_error": float(np.percentile(tpot, 90)),
                "ttft_measured_over_predicted": float(
                    np.median([r["measured_ttft_s"] / r["predicted_ttft_s"] for r in rs])
                ),
                "tpot_measured_over_predicted": float(
                    np.median([r["measured_tpot_s"] / r["predicted_tpot_s"] for r in rs])
                ),
            }
        )
    return out


def _price(d: Deployment, overheads: dict | None) -> tuple[dict | None, dict | None]:
    """(the row, None) of one deployment priced, or (None, why it was skipped)."""
    from costmodel.engine.served import NoRoomForOneRequest

    try:
        p = predict(d, overheads)
    except NoRoomForOneRequest as err:  # counted apart: the weights leave no cache for one request
        return None, {"id": d.id, "reason": f"too big for its devices: {err}"}
    except CostModelError as err:
        return None, {"id": d.id, "reason": f"cannot be priced: {err}"}
    row = {
        "id": d.id,
        "system": d.system,
        "backend": d.backend,
        "model_path": d.model_path,
        "mode": d.mode,
        "measured_ttft_s": d.ttft_s,
        "predicted_ttft_s": p.ttft_s,
        "measured_tpot_s": d.tpot_s,
        "predicted_tpot_s": p.tpot_s,
        "command": d.command(),
    }
    return row | ({"assumed": list(d.assumed)} if d.assumed else {}), None


def _price_chunk(args) -> list:
    chunk, overheads = args
    return [_price(d, overheads) for d in chunk]


def validate_serving(path: str | Path, *, overheads: dict | None = None, workers: int | None = None) -> dict:
    """``{"rows", "skipped", "summary"}`` for a deployments file, priced over ``workers`` processes (every core
    by default; 1: in this process), in the file's order, with a progress bar on a terminal."""
    import os

    from costmodel.core.progress import bar

    deployments, skipped = read(path)
    workers = max(1, min(workers or os.cpu_count() or 1, len(deployments) // 20 or 1))
    # the costliest first (a simulation's work grows with its clients' output tokens), in small chunks, so that no
    # process is left with the slowest rows at the end; the results back in the file's order
    order = sorted(range(len(deployments)), key=lambda i: -(deployments[i].concurrency or 1) * deployments[i].osl)
    chunks = [order[i : i + 4] for i in range(0, len(order), 4)]
    priced: list = [None] * len(deployments)
    with bar(len(deployments), "deployments") as advance:
        if workers == 1:
            results = (_price_chunk(([deployments[i] for i in c], overheads)) for c in chunks)
            for chunk, got in zip(chunks, results):
                for i, one in zip(chunk, got):
                    priced[i] = one
                advance(len(chunk))
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
                tasks = [([deployments[i] for i in c], overheads) for c in chunks]
                for chunk, got in zip(chunks, pool.map(_price_chunk, tasks)):
                    for i, one in zip(chunk, got):
                        priced[i] = one
                    advance(len(chunk))
    rows = [row for row, _ in priced if row is not None]
    skipped += [why for _, why in priced if why is not None]
    return {
        "rows": rows,
        "skipped": skipped,
        "summary": summary(rows),
        "reasons": dict(Counter(s["reason"].split(":")[0] for s in skipped)),
    }


def summary_table(report: dict) -> str:
    from costmodel.render.text import aligned

    rows = [
        (
            "system",
            "engine",
            "model",
            "mode",
            "n",
            "TTFT |err| median",
            "p90",
            "measured/predicted",
            "TPOT |err| median",
            "p90",
            "measured/predicted",
        )
    ]
    for s in sorted(
        report["summary"],
        key=lambda s: (s["system"] == "all", s["mode"] == "all", s["system"], s["backend"], s["model_path"], s["mode"]),
    ):
        rows.append(
            (
                s["system"],
                s["backend"],
                s["model_path"],
                s["mode"],
                str(s["n"]),
                f"{s['ttft_median_error']:.1%}",
                f"{s['ttft_p90_error']:.1%}",
                f"{s['ttft_measured_over_predicted']:.2f}",
                f"{s['tpot_median_error']:.1%}",
                f"{s['tpot_p90_error']:.1%}",
                f"{s['tpot_measured_over_predicted']:.2f}",
            )
        )
    totals = sum(s["system"] == "all" for s in report["summary"])
    lines = aligned(rows, right=set(range(4, 11)), rules=(1, len(rows) - totals))
    total = len(report["rows"]) + len(report["skipped"])
    lines += ["", f"{len(report['rows'])} of {total} deployments predicted; not expressible:"]
    lines += [f"  {n:4d}  {reason}" for reason, n in sorted(report["reasons"].items(), key=lambda kv: -kv[1])]
    assumed = Counter(a for r in report["rows"] for a in r.get("assumed", ()))
    if assumed:
        lines += ['predicted with what the row does not record (each row\'s "assumed" in the JSON):']
        lines += [f"  {n:4d}  {a}" for a, n in sorted(assumed.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


def serving_command(path: str, json_path: str | None, plot_path: str | None, fmt: str = "table"):
    """``costmodel validate --serving FILE``: the summary; ``--json`` the rows, skipped rows and summary;
    ``--plot`` predicted against measured TTFT and TPOT (log-log)."""
    import json

    from costmodel.core.files import write_text, wrote
    from costmodel.validation import check_outputs

    check_outputs(json_path, plot_path)
    report = validate_serving(path)
    quiet = json_path == "-"
    if not quiet:
        if fmt in ("csv", "markdown"):
            from costmodel.render.records import records_csv, records_markdown

            yield (records_csv if fmt == "csv" else records_markdown)(report["summary"]).rstrip("\n")
        else:
            yield summary_table(report)
    if json_path is not None:
        write_text(json_path, json.dumps({k: report[k] for k in ("rows", "skipped", "summary")}))
        if not quiet:
            yield from wrote(json_path)
    if plot_path is not None:
        from costmodel.render.plots import save
        from costmodel.render.serving_plots import draw_predicted_vs_measured

        rows = [
            {
                "measured_s": r[f"measured_{k}_s"],
                "predicted_s": r[f"predicted_{k}_s"],
                "group": f"{k.upper()} {r['backend']}",
            }
            for r in report["rows"]
            for k in ("ttft", "tpot")
        ]
        save(draw_predicted_vs_measured(rows, "served deployments: predicted against measured"), plot_path)
        if not quiet:
            yield from wrote(plot_path)
