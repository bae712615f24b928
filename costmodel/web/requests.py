"""What the page's JSON API takes: one typed request (:class:`ViewRequest`), validated by pydantic, whose fields
are the command line's options under the same names (``input-len`` is ``--input-len``), grouped as a person thinks
of them (:data:`GROUPS`): the model, the hardware and its layout, the engine, the load, the targets.

Every field is typed and bounded (a shipped device or preset id, never a path; counts within the limits of
:mod:`costmodel.web.fields`), so a request can neither name a file nor ask for unbounded work; a bad value is
refused with the field named. :meth:`ViewRequest.command` is the command line that prints the same numbers.
"""

from __future__ import annotations

import shlex
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from costmodel.core.vocab import DEFAULTS
from costmodel.web.fields import (
    MAX_CLIENTS,
    MAX_CONFIG_BYTES,
    MAX_DEVICES,
    MAX_GPUS,
    MAX_HEADS,
    MAX_REQUESTS,
    MAX_TOKENS,
    MAX_WIDTH,
)

#: What the page shows: one attention layer's ops (MHA, GQA and MQA side by side, or one), its exact counts and Θ
#: forms, a model's step (no engine), its MHA, GQA, MQA and MLA versions side by side, a served run, a load curve, a plan, a recommendation.
VIEWS = ("attention", "derive", "step", "variants", "served", "curve", "capacity", "plan", "recommend")
#: The most points on one load curve.
MAX_CURVE_POINTS = 16

WEIGHT_DTYPES = Literal["bf16", "fp8", "fp8_block", "int8", "int4", "mxfp4", "nvfp4"]
#: The field groups, in the form's order, and the fields in each (by their names in a request).
GROUPS = {
    "view": ("view",),
    "model": ("model", "config", "weight-dtype", "kv-dtype"),
    "one attention layer (attention, derive)": (
        "variant",
        "groups",
        "mode",
        "seq",
        "d-model",
        "heads",
        "head-dim",
        "dtype",
    ),
    "hardware and layout": (
        "gpu",
        "tp",
        "pipeline-parallel-size",
        "attention-dp",
        "expert-parallel",
        "replicas",
        "prefill-tp",
        "prefill-workers",
        "decode-tp",
        "decode-workers",
        "gpus",
        "max-gpus",
    ),
    "engine": (
        "engine",
        "engine-version",
        "max-num-seqs",
        "max-num-batched-tokens",
        "gpu-memory-utilization",
        "block-size",
        "max-model-len",
        "enable-chunked-prefill",
        "enable-prefix-caching",
        "async-scheduling",
        "evaluator",
    ),
    "load": (
        "input-len",
        "output-len",
        "concurrency",
        "request-rate",
        "num-requests",
        "burstiness",
        "warmup-requests",
        "length-dist",
        "spread",
        "client-connections",
        "frontend",
        "batch",
        "context",
        "max-concurrency",
    ),
    "targets": ("ttft-ms", "tpot-ms", "statistic", "minimise", "price-per-hour", "load", "variants"),
    "engine features (served, curve)": (
        "speculative-config",
        "acceptance-length",
        "prefix-len",
        "prefix-share",
        "turns",
    ),
}
#: The fields each view reads (the others are left out of its command and its cache key).
_ATTENTION = set(GROUPS["one attention layer (attention, derive)"])
_POOLS = {"prefill-tp", "prefill-workers", "decode-tp", "decode-workers"}
USES = {
    "attention": {"gpu", "batch", "context"} | _ATTENTION,
    "derive": {"variant", "groups", "mode"},
    "step": {"model", "config", "weight-dtype", "kv-dtype", "gpu", "tp", "attention-dp", "expert-parallel", "batch"}
    | {"context"},
    "served": {*GROUPS["model"], *GROUPS["hardware and layout"][:10], *GROUPS["engine"], *GROUPS["load"][:11]},
    "plan": {*GROUPS["model"], "gpu", "gpus", *GROUPS["engine"][:-1], "input-len", "output-len", "num-requests"}
    | {"burstiness", "max-concurrency", "ttft-ms", "tpot-ms"},
    "recommend": {*GROUPS["model"], "gpu", "max-gpus", *GROUPS["engine"][:-1], *GROUPS["load"][:11]}
    | {*GROUPS["targets"], "evaluator"},
}
USES["served"] |= set(GROUPS["engine features (served, curve)"])
USES["curve"] = USES["served"] - _POOLS
USES["capacity"] = (
    USES["recommend"] - {"max-gpus", "concurrency", "request-rate", "client-connections", "minimise"}
) | {
    "load",
    "variants",
}
USES["variants"] = USES["step"] - {"attention-dp", "expert-parallel"}

Count = Annotated[int, Field(ge=1, le=MAX_CLIENTS)]
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Devices = Annotated[int, Field(ge=1, le=MAX_DEVICES)]


class ViewRequest(BaseModel):
    """One view's inputs. A field left out takes the default shown beside it on the page (None: the engine's or
    the checkpoint's own, as on the command line)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    view: Literal["attention", "derive", "step", "variants", "served", "curve", "capacity", "plan", "recommend"] = (
        Field("served", description="what to show")
    )
    # the model
    model: str | None = Field("llama-3.1-8b", max_length=128, description="a preset's id or alias")
    config: str | None = Field(None, max_length=MAX_CONFIG_BYTES, description="or a config.json's text, pasted")
    weight_dtype: WEIGHT_DTYPES | None = Field(None, alias="weight-dtype", description="weights (the checkpoint's)")
    kv_dtype: Literal["bf16", "fp8"] | None = Field(None, alias="kv-dtype", description="KV cache (the engine's)")
    # one attention layer, without a model
    variant: Literal["mha", "gqa", "mqa"] | None = Field(None, description="attention (MHA, GQA, MQA side by side)")
    groups: Annotated[int, Field(ge=1, le=MAX_HEADS)] | None = Field(None, description="GQA's KV heads (gcd(h, 8))")
    mode: Literal["incremental", "batched", "generate"] = Field("incremental", description="decode step or prompt")
    seq: Tokens | None = Field(None, description="new tokens (1 incremental, 4096 batched)")
    d_model: Annotated[int, Field(ge=1, le=MAX_WIDTH)] = Field(
        DEFAULTS["d_model"], alias="d-model", description="width"
    )
    heads: Annotated[int, Field(ge=1, le=MAX_HEADS)] = Field(DEFAULTS["heads"], description="query heads")
    head_dim: Annotated[int, Field(ge=1, le=MAX_HEADS)] | None = Field(None, alias="head-dim", description="(d/h)")
    dtype: Literal["fp32", "bf16", "fp16", "fp8"] = Field(DEFAULTS["dtype"], description="activations and cache")
    # the hardware and its layout
    gpu: list[str] = Field(["h100"], min_length=1, max_length=MAX_GPUS, description="devices (plan, recommend: each)")
    tp: Devices = Field(1, description="tensor parallel")
    pipeline_parallel_size: Devices = Field(1, alias="pipeline-parallel-size", description="pipeline stages")
    attention_dp: Devices = Field(1, alias="attention-dp", description="attention data parallel groups")
    expert_parallel: bool = Field(False, alias="expert-parallel", description="experts whole on devices")
    replicas: Devices = Field(1, description="engines behind a router")
    prefill_tp: Devices | None = Field(None, alias="prefill-tp", description="prefill workers' TP (disaggregated)")
    prefill_workers: Devices | None = Field(None, alias="prefill-workers", description="prefill workers")
    decode_tp: Devices | None = Field(None, alias="decode-tp", description="decode workers' TP")
    decode_workers: Devices | None = Field(None, alias="decode-workers", description="decode workers")
    gpus: Devices = Field(8, description="GPUs to place the model on (plan)")
    max_gpus: Annotated[int, Field(ge=1, le=1024)] = Field(64, alias="max-gpus", description="most GPUs (recommend)")
    # the engine
    engine: Literal["vllm", "sglang", "trtllm", "atom"] = Field("vllm", description="the serving engine")
    engine_version: str | None = Field(
        None, alias="engine-version", max_length=16, pattern=r"^[0-9][0-9a-z.]*$", description="release (latest)"
    )
    max_num_seqs: Count | None = Field(None, alias="max-num-seqs", description="sequences at once (engine's)")
    max_num_batched_tokens: Tokens | None = Field(None, alias="max-num-batched-tokens", description="token budget")
    gpu_memory_utilization: float | None = Field(
        None, alias="gpu-memory-utilization", gt=0, le=1, description="memory share (engine's)"
    )
    block_size: Annotated[int, Field(ge=1, le=1024)] | None = Field(None, alias="block-size", description="KV page")
    max_model_len: Tokens | None = Field(None, alias="max-model-len", description="longest request (engine's)")
    enable_chunked_prefill: bool | None = Field(None, alias="enable-chunked-prefill", description="(engine's)")
    enable_prefix_caching: bool | None = Field(None, alias="enable-prefix-caching", description="(engine's)")
    async_scheduling: bool | None = Field(None, alias="async-scheduling", description="(engine's)")
    evaluator: Literal["simulation", "steady-state"] | None = Field(None, description="(simulation)")
    # the load
    input_len: Tokens = Field(1024, alias="input-len", description="prompt tokens")
    output_len: Tokens = Field(128, alias="output-len", description="output tokens")
    concurrency: list[Count] | None = Field([16], max_length=MAX_CURVE_POINTS, description="clients (a curve: several)")
    request_rate: list[Annotated[float, Field(gt=0, le=1e5)]] | None = Field(
        None, alias="request-rate", max_length=MAX_CURVE_POINTS, description="requests/s, open loop (instead)"
    )
    num_requests: Annotated[int, Field(ge=1, le=MAX_REQUESTS)] | None = Field(
        None, alias="num-requests", description="measured (10 per client)"
    )
    burstiness: float = Field(1.0, gt=0, le=100, description="arrivals' gamma shape (1: Poisson)")
    warmup_requests: Annotated[int, Field(ge=0, le=MAX_REQUESTS)] = Field(
        0, alias="warmup-requests", description="run first, left out"
    )
    length_dist: Literal["fixed", "uniform", "range", "normal"] = Field(
        "fixed", alias="length-dist", description="lengths around the two"
    )
    spread: float = Field(0.0, ge=0, le=1, description="the lengths' spread (a share)")
    client_connections: Count | None = Field(None, alias="client-connections", description="client's in flight")
    frontend: Literal["dynamo", "engine"] = Field("dynamo", description="the front end's latency")
    batch: Count = Field(DEFAULTS["batch"], description="sequences in the step (step)")
    context: Tokens | None = Field(None, description="cached positions (4096; attention: by mode)")
    max_concurrency: Count = Field(256, alias="max-concurrency", description="most clients a plan tries")
    # the engine's features
    speculative_config: str | None = Field(
        None, alias="speculative-config", max_length=512, description='speculative decoding, {"method": "mtp", ...}'
    )
    acceptance_length: float | None = Field(
        None, alias="acceptance-length", ge=1, le=17, description="tokens a verify step yields"
    )
    prefix_len: Annotated[int, Field(ge=0, le=MAX_TOKENS)] = Field(0, alias="prefix-len", description="shared prefix")
    prefix_share: float | None = Field(None, alias="prefix-share", gt=0, le=1, description="requests sharing it (1)")
    turns: Annotated[int, Field(ge=1, le=64)] = Field(1, description="a conversation's turns")
    # the targets
    ttft_ms: float | None = Field(None, alias="ttft-ms", gt=0, le=1e7, description="TTFT target")
    tpot_ms: float | None = Field(None, alias="tpot-ms", gt=0, le=1e7, description="TPOT target")
    statistic: Literal["mean", "p90"] = Field("mean", description="of the targets (recommend)")
    minimise: Literal["gpus", "cost", "energy"] = Field("gpus", description="what recommend minimises")
    price_per_hour: float | None = Field(None, alias="price-per-hour", gt=0, le=1e4, description="$ per GPU-hour")
    load: Literal["concurrency", "request-rate"] = Field("concurrency", description="what capacity searches")
    variants: bool = Field(True, description="capacity: the MHA, GQA and MQA versions too")

    @field_validator("gpu")
    @classmethod
    def _shipped(cls, gpus: list[str]) -> list[str]:
        from costmodel.hardware.catalog import is_listed

        for gpu in gpus:
            if not is_listed(gpu):
                raise ValueError(f"{gpu[:40]!r} is not a shipped device (costmodel hardware list); never a path")
        return gpus

    @field_validator("model")
    @classmethod
    def _preset(cls, model: str | None) -> str | None:
        from costmodel.model.presets import is_preset

        if model not in (None, "") and not is_preset(model):
            raise ValueError(f"{model[:40]!r} is not a preset (costmodel models list); paste a config.json instead")
        return model or None

    @model_validator(mode="before")
    @classmethod
    def _pasted_replaces_preset(cls, data):
        if isinstance(data, dict) and data.get("config"):
            data = {**data, "model": None}
        if isinstance(data, dict) and (data.get("request-rate") or data.get("request_rate")):
            data = {"concurrency": None, **data}  # a rate replaces the default clients
        return data

    @model_validator(mode="after")
    def _one_load(self) -> ViewRequest:
        if self.model is None and self.config is None and self.view not in ("attention", "derive"):
            raise ValueError("give a model: a preset (model) or a pasted config.json (config)")
        if self.view in ("served", "curve", "recommend") and bool(self.concurrency) == bool(self.request_rate):
            raise ValueError("give the load as clients (concurrency) or a request rate (request-rate), one of them")
        if self.view == "capacity" and self.ttft_ms is None and self.tpot_ms is None:
            raise ValueError("capacity needs a target: ttft-ms, tpot-ms or both")
        if self.view in ("served", "recommend") and len(self.concurrency or self.request_rate) > 1:
            raise ValueError(f"a {self.view} view takes one load; several are a curve (view=curve)")
        return self

    def used(self) -> dict:
        """The fields this view reads, by their request names, as given or defaulted."""
        return {k: v for k, v in self.model_dump(by_alias=True).items() if k in USES[self.view] or k == "view"}

    def key(self) -> str:
        """The cache key: the fields this view reads, canonical."""
        import json

        return json.dumps(self.used(), sort_keys=True)

    def query(self) -> str:
        """The page's URL query of this view: the fields it reads that differ from their defaults."""
        from urllib.parse import urlencode

        defaults = ViewRequest.model_construct().model_dump(by_alias=True)
        pairs = [
            (k, ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v) if isinstance(v, list) else v)
            for k, v in self.used().items()
            if v is not None and (v != defaults[k] or k == "view")
        ]
        return urlencode([(k, str(v).lower() if isinstance(v, bool) else v) for k, v in pairs])

    def command(self) -> str:
        """The command line that prints this view's numbers."""
        verb = "predict" if self.view in ("attention", "step", "variants", "served", "curve") else self.view
        args = ["costmodel", verb]
        defaults = ViewRequest.model_construct().model_dump(by_alias=True)
        for name, value in self.used().items():
            if name in ("view", "config") or value is None:
                continue
            if name in ("concurrency", "request-rate"):
                args += [f"--{name}", ",".join(f"{v:g}" for v in value)]
            elif name == "gpu":
                args += [a for g in value for a in (f"--{name}", g)]
            elif isinstance(value, bool):
                if value != defaults[name]:
                    args.append(f"--{name}" if value else f"--no-{name}")
            elif name in ("model", "engine") or value != defaults[name]:
                args += [f"--{name}", f"{value:g}" if isinstance(value, float) else str(value)]
        if self.config is not None:
            args += ["--model", "config.json"]
        if self.view == "variants":
            args.append(f"--{self.view}")  # the view is the option: --variants
        if self.view == "derive":
            args.append("--asymptotic")
        if self.view == "served" and self.prefill_workers:
            args.insert(args.index("--engine"), "--disaggregated")
        return shlex.join(args)


def form() -> dict:
    """The form the page draws: each group's fields with their type, choices, bounds, default and description
    (from the request's JSON schema, so the page and the API cannot disagree)."""
    schema = ViewRequest.model_json_schema(by_alias=True)
    props = schema["properties"]
    return {group: {name: props[name] for name in names} for group, names in GROUPS.items()}
