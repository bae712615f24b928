"""A file of measured deployments in the layout of NVIDIA aiconfigurator's silicon sample, read: each row a Deployment (its system, engine, model, precision, layout and measured TTFT and TPOT), or the reason it cannot be expressed."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

from costmodel.core.errors import CostModelError
from costmodel.engine.config import default_kv_dtype
from costmodel.validation.launchers import (
    DYNAMO_TRTLLM_KV_FRACTION,
    EXPERTS_SHARDED_OVER_DP,
    INFERENCEX_SPREAD,
    MXFP4_CHECKPOINTS,
    MXFP4_MODES,
    PRECISIONS,
    UNRECORDED_WORKERS,
    checkpoint_model,
    dynamo_budget,
    inferencex_recipe,
    inferencex_run,
    launched_by_dynamo,
    profile_of,
)

#: The memory fraction under the name each engine gives it (one setting of `costmodel predict`).
MEMORY_FLAGS = {"sglang": "--mem-fraction-static", "trtllm": "--free-gpu-memory-fraction"}

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
            cmd += [MEMORY_FLAGS.get(self.backend, "--gpu-memory-utilization"), f"{self.memory_fraction:g}"]
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
        conc = _clients(row, stages)
        if isinstance(conc, str):
            return conc
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
    tp = stages[""].tp if "" in stages else None
    recipe = inferencex_recipe(row, preset.id, isl, osl, conc, tp)
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
    if "" in stages:
        return _aggregated(row, stages[""], common, named, recipe, dynamo, isl)
    return Deployment(*common, prefill=stages["prefill"], decode=stages["decode"], **named)


def _clients(row: dict, stages: dict) -> int | str:
    """The row's clients (its source's silicon_concurrency, else the batch times the attention data parallel
    groups), an aggregated layout's replicas set where they are a whole multiple of it; or why it cannot be."""
    m = re.search(r"silicon_concurrency=(\d+)", row.get("silicon_data_source") or "")
    if "" not in stages:  # disaggregated: the clients are the load; each pool's batch limit is its workers'
        return int(m.group(1)) if m else "no concurrency"
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
    return conc


def _aggregated(row: dict, st: Stage, common: tuple, named: dict, recipe: dict, dynamo: bool, isl: int) -> Deployment:
    """An aggregated row's deployment: its recipe's layout where that differs from the recorded one, and the token
    budget and memory fraction its launcher gives the engine (from the recorded batch)."""
    batch = st.batch
    if recipe.get("attention_dp") == 1 and st.attention_dp > 1:
        named["assumed"] += (
            f"layout: its recipe's, one server of {st.tp} devices with expert parallel, not the "
            f"recorded {st.attention_dp} attention data parallel groups (another export of the same "
            "runs records the recipe's)",
        )
        st = replace(st, attention_dp=1, batch=st.batch * st.attention_dp)
    tokens = recipe.get("max_num_batched_tokens") or (dynamo_budget(row["backend"], batch, isl) if dynamo else None)
    fraction = DYNAMO_TRTLLM_KV_FRACTION if dynamo and row["backend"] == "trtllm" else recipe.get("memory_fraction")
    return Deployment(
        *common,
        layout=st,
        max_num_batched_tokens=tokens,
        memory_fraction=fraction,
        async_scheduling=recipe.get("async_scheduling"),
        prefix_caching=recipe.get("prefix_caching"),
        **named,
    )


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
