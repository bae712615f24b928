"""Model shapes: the shipped presets and Hugging Face ``config.json`` files, read into one schema.

A :class:`ModelPreset` says only what a model's shape is (layers, heads, key/value heads, widths,
vocabulary, norm, gating); what it costs and how many parameters and cache bytes it holds follow from
the attention program and the ops around it (:mod:`costmodel.model.step`).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
from collections.abc import Iterator
from contextvars import ContextVar
from importlib import resources
from pathlib import Path, PurePath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from costmodel.core.errors import CostModelError
from costmodel.core.files import load_yaml
from costmodel.core.vocab import MAX_DIM, check_divisible, kv_heads

PACKAGE = "costmodel.model_presets"


class MLAShape(BaseModel):
    """Multi-head latent attention (DeepSeek-V2): the latent and per-head widths (:mod:`costmodel.counts.mla`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_rank: int = Field(ge=1, le=MAX_DIM, description="latent rank c (kv_lora_rank)")
    rope_dim: int = Field(ge=1, le=MAX_DIM, description="decoupled rotary key dimension p (qk_rope_head_dim)")
    nope_dim: int = Field(ge=1, le=MAX_DIM, description="per-head key dimension without rotation (qk_nope_head_dim)")
    value_dim: int = Field(ge=1, le=MAX_DIM, description="per-head value dimension (v_head_dim)")
    q_rank: int | None = Field(default=None, ge=1, le=MAX_DIM, description="query latent rank l (q_lora_rank)")


#: ``MoEShape.routing``: uniform, balanced, or power-law:ALPHA with ALPHA > 1.
ROUTING_PATTERN = r"^(uniform|balanced|power-law:(1\.[0-9]*[1-9][0-9]*|[2-9](\.[0-9]+)?|[1-9][0-9]+(\.[0-9]+)?))$"


class MoEShape(BaseModel):
    """A mixture-of-experts feed-forward block: ``experts`` routed experts of which each token uses
    ``experts_per_token``, always-on shared experts, and a linear router."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    experts: int = Field(ge=1, le=MAX_DIM)
    experts_per_token: int = Field(ge=1, le=MAX_DIM)
    expert_d_ff: int = Field(ge=1, le=MAX_DIM, description="FFN width of one routed expert")
    shared_d_ff: int = Field(default=0, ge=0, le=MAX_DIM, description="FFN width of the shared experts together")
    shared_gate: bool = False  # a sigmoid gate of width 1 on the shared expert (Qwen2-MoE)
    router_bias: bool = False  # a per-expert score bias (DeepSeek-V3's auxiliary-loss-free balancing)
    layers: int = Field(ge=1, le=MAX_DIM, description="layers with this block; the others have the dense FFN")
    expert_ranks: int = Field(
        default=1,
        ge=1,
        le=MAX_DIM,
        description="devices the routed experts are spread over (expert parallel): a device "
        "slice holds experts / expert_ranks of them; 1 in a preset",
    )
    routing: str = Field(
        default="uniform",
        pattern=ROUTING_PATTERN,
        description="how the router spreads a batch's tokens over the experts: uniform (each "
        "token's experts drawn at random), balanced (every expert the same share, "
        "as many distinct experts as rows allow) or power-law:ALPHA (expert loads "
        "drawn from a power law of exponent ALPHA > 1, the busiest device timed)",
    )

    @property
    def routed_experts(self) -> int:
        """Routed experts of the whole model (the router scores them all)."""
        return self.experts * self.expert_ranks

    @model_validator(mode="after")
    def _top_k(self) -> MoEShape:
        if self.experts_per_token > self.routed_experts:
            raise ValueError(f"experts_per_token {self.experts_per_token} exceeds experts {self.experts}")
        return self


class Quantization(BaseModel):
    """How the projection weights are stored (``quantization_config`` of a checkpoint)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight_dtype: Literal["int4", "int8", "fp8", "fp8_block", "mxfp4", "nvfp4"]
    group_size: int = Field(default=0, ge=0, le=MAX_DIM, description="weights per scale group (0: per channel)")
    method: str = ""
    scope: Literal["all", "experts"] = Field(
        default="all",
        description="the projection weights stored so: all of them, or the routed experts' only "
        "(the other projections at the activation dtype, as gpt-oss's MXFP4 checkpoint)",
    )


class ModelPreset(BaseModel):
    """The shape of a model, from a preset file or a Hugging Face config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    aliases: tuple[str, ...] = ()
    name: str
    architecture: Literal["decoder", "encoder-decoder"]
    d_model: int = Field(ge=1, le=MAX_DIM)
    layers: int = Field(ge=1, le=MAX_DIM, description="decoder layers")
    encoder_layers: int = Field(default=0, ge=0, le=MAX_DIM)
    heads: int = Field(ge=1, le=MAX_DIM)
    kv_heads: int = Field(ge=1, le=MAX_DIM, description="key/value heads of decoder self-attention")
    encoder_kv_heads: int | None = Field(default=None, ge=1, le=MAX_DIM)
    cross_kv_heads: int | None = Field(default=None, ge=1, le=MAX_DIM)
    head_dim: int = Field(ge=1, le=MAX_DIM)
    d_ff: int = Field(ge=1, le=MAX_DIM)
    ffn_gated: bool
    vocab: int = Field(ge=1, le=MAX_DIM)
    tied_embeddings: bool
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    bias: bool = False
    learned_positions: int = Field(default=0, ge=0, le=MAX_DIM)
    parallel_block: bool = False
    rope: bool = False  # rotary position embeddings applied to q and k of every new token
    layer_norms: int | None = Field(
        default=None, ge=0, le=8, description="norms per decoder layer (default: 1 for a parallel block, else 2)"
    )
    mla: MLAShape | None = None
    moe: MoEShape | None = None
    sliding_window: int | None = Field(default=None, ge=1, le=MAX_DIM)
    local_layers: int = Field(default=0, ge=0, le=MAX_DIM, description="layers attending within sliding_window")
    quantization: Quantization | None = None
    published_params: float | None = None
    source: str
    # the Hub revision (branch, tag or commit) a Hub model's config.json was read at; None: main, or not a Hub model
    revision: str | None = Field(default=None, pattern=r"^[\w.-]{1,96}$")
    notes: str = ""

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelPreset:
        for name, g in (
            ("kv_heads", self.kv_heads),
            ("encoder_kv_heads", self.encoder_kv_heads),
            ("cross_kv_heads", self.cross_kv_heads),
        ):
            if g is not None and self.heads % g:
                raise ValueError(f"{name} {g} does not divide heads {self.heads}")
        if (self.architecture == "encoder-decoder") != (self.encoder_layers > 0):
            raise ValueError("encoder_layers must be > 0 exactly for encoder-decoder models")
        if (self.sliding_window is None) != (self.local_layers == 0):
            raise ValueError("sliding_window and local_layers > 0 go together")
        for name, count in (("local_layers", self.local_layers), ("moe.layers", self.moe.layers if self.moe else 0)):
            if count > self.layers:
                raise ValueError(f"{name} {count} exceeds layers {self.layers}")
        if (self.mla or self.moe or self.sliding_window) and self.architecture != "decoder":
            raise ValueError("mla, moe and sliding windows are modelled in decoder-only models")
        if self.quantization is not None and self.quantization.scope == "experts" and self.moe is None:
            raise ValueError("quantization scope 'experts' needs a mixture of experts (moe); give scope 'all'")
        return self

    @property
    def enc_kv(self) -> int:
        return self.encoder_kv_heads or self.heads

    @property
    def cross_kv(self) -> int:
        return self.cross_kv_heads or self.kv_heads

    @property
    def norms_per_layer(self) -> int:
        """Norms per decoder layer: the config's count, else one for a parallel block and two otherwise,
        one more for cross-attention."""
        if self.layer_norms is not None:
            return self.layer_norms
        return (1 if self.parallel_block else 2) + (self.architecture == "encoder-decoder")

    def with_kv_heads(self, g: int) -> ModelPreset:
        """The same model with ``g`` key/value heads in every decoder attention (a what-if); an MLA model
        becomes grouped-query attention with its query/key head dimension."""
        check_divisible(self.heads, g)
        if g == self.kv_heads and not self.mla and (self.cross_kv_heads is None or self.cross_kv_heads == g):
            return self
        update = {"kv_heads": g, "cross_kv_heads": g if self.cross_kv_heads else None}
        if self.mla:
            update |= {"mla": None, "head_dim": self.mla.nope_dim + self.mla.rope_dim}
        return self._what_if(update)

    def with_routing(self, routing: str) -> ModelPreset:
        """The same mixture-of-experts model with its router spreading tokens as ``routing`` says (uniform,
        balanced or power-law:ALPHA; :attr:`MoEShape.routing`)."""
        import re

        if self.moe is None:
            raise CostModelError(f"routing applies to mixture-of-experts models; {self.id} has none")
        if not isinstance(routing, str) or not re.match(ROUTING_PATTERN, routing):
            raise CostModelError(
                f"routing must be uniform, balanced or power-law:ALPHA with ALPHA > 1 (e.g. "
                f"power-law:1.2), got {routing!r}"
            )
        return self.model_copy(update={"moe": self.moe.model_copy(update={"routing": routing})})

    def _what_if(self, update: dict) -> ModelPreset:
        """The model with another attention layout: named as such, and no longer the published count."""
        changed = self.model_copy(update=update)
        return changed.model_copy(
            update={"name": f"{self.name}, as {changed.attention_label}", "published_params": None}
        )

    def with_variant(self, variant: str, groups: int | None = None) -> ModelPreset:
        """The same model with MHA, MQA, GQA (``groups`` key/value heads, default gcd(h, 8)) or MLA: a
        what-if. A grouped-query model becomes MLA with DeepSeek-V2's ratios to its head dimension k:
        latent rank 4k, rotary key k/2, no query latent (:data:`MLA_WHAT_IF`)."""
        if variant.lower() == "mla":
            if groups is not None:
                raise CostModelError(f"groups {groups} is only valid with variant gqa")
            if self.mla:
                return self
            if self.architecture != "decoder":
                raise CostModelError(f"variant mla applies to decoder-only models; {self.id} is {self.architecture}")
            k = self.head_dim
            shape = MLAShape(
                kv_rank=MLA_WHAT_IF["kv_rank"] * k,
                rope_dim=max(int(MLA_WHAT_IF["rope_dim"] * k), 1),
                nope_dim=k,
                value_dim=k,
            )
            return self._what_if({"mla": shape, "kv_heads": self.heads})
        return self.with_kv_heads(kv_heads(variant, self.heads, groups))

    @property
    def attention_label(self) -> str:
        if self.mla:
            return f"MLA (latent {self.mla.kv_rank} + rotary {self.mla.rope_dim})"
        kind = "MHA" if self.kv_heads == self.heads else "MQA" if self.kv_heads == 1 else "GQA"
        return f"{kind} (g={self.kv_heads})"


#: The MLA what-if's shape relative to the head dimension k: DeepSeek-V2's d_c = 4 d_h and d_h^R = d_h / 2
#: (DeepSeek-V2 2024, Section 2.1.2 and Appendix: 512 = 4 x 128, 64 = 128 / 2).
MLA_WHAT_IF = {"kv_rank": 4, "rope_dim": 0.5}


# --- loading -----------------------------------------------------------------------------------------


def _key(name: str) -> str:
    """A preset name as the index holds it: lower case, ``_`` as ``-``."""
    return name.lower().replace("_", "-")


@functools.lru_cache(maxsize=1)
def _files() -> dict[str, object]:
    """Every preset's id and aliases (lower case, ``_`` as ``-``) and its file, read once per process."""
    from costmodel.core.files import safe_yaml

    index = {}
    for f in resources.files(PACKAGE).iterdir():
        if f.name.endswith(".yaml"):
            data = safe_yaml(f.read_text(encoding="utf-8"))
            for name in (data["id"], *data.get("aliases", ())):
                index[_key(name)] = f
    return index


def is_preset(name: str) -> bool:
    """Whether ``name`` is a preset's id or alias (not a path)."""
    return _key(name) in _files()


def preset_ids() -> list[str]:
    return sorted(f.name.removesuffix(".yaml") for f in resources.files(PACKAGE).iterdir() if f.name.endswith(".yaml"))


def _validated(data: dict, origin: str) -> ModelPreset:
    try:
        return ModelPreset.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise CostModelError(f"{origin}: field {where}: {first['msg'].removeprefix('Value error, ')}") from None


#: The name a pasted ``config.json`` goes by inside :func:`pasted_config`: no preset's, and no file's.
PASTED = "<pasted config.json>"
#: The text of the config.json pasted for this computation, if any (see :func:`pasted_config`).
_PASTED_TEXT: ContextVar[str | None] = ContextVar("costmodel_pasted_config", default=None)


@contextlib.contextmanager
def pasted_config(text: str) -> Iterator[str]:
    """Within it, :func:`load_model` of the name it yields (:data:`PASTED`) is the model a ``config.json``'s
    ``text`` describes, read in memory as ``pasted/config.json``: nothing is written, and no path is taken from
    whoever pasted it (the web page's models of one's own)."""
    token = _PASTED_TEXT.set(text)
    try:
        yield PASTED
    finally:
        _PASTED_TEXT.reset(token)


def load_model(name: str) -> ModelPreset:
    """A preset by id or alias (case-insensitive; a Hugging Face id without its owner where one preset's alias has
    it), or a Hugging Face ``config.json`` by path."""
    from costmodel.core.checks import text

    text("model name", name)
    pasted = _PASTED_TEXT.get()
    if name == PASTED and pasted is not None:
        from costmodel.model.hf_config import hf_config_fields

        return _validated(*hf_config_fields(pasted, PurePath("pasted", "config.json")))
    try:
        is_path = Path(name).is_file() or Path(name).is_dir()
    except (OSError, ValueError):  # a name too long for the file system is no file
        is_path = False
    if name.endswith(".json") or is_path:
        return load_hf_config(name)
    f = _files().get(_key(name))
    if f is None and "/" not in name:  # a Hugging Face id without its owner, where one preset has it
        owned = {v for k, v in _files().items() if k.endswith("/" + _key(name))}
        f = owned.pop() if len(owned) == 1 else None
    if f is None:
        from costmodel.model.hub import is_repo_id

        repo, _, revision = name.partition("@")
        if is_repo_id(repo):  # a Hugging Face Hub id that no preset has: its config.json, cached or fetched
            return load_hub_model(repo, revision or "main")
        close = difflib.get_close_matches(name.lower(), list(_files()), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise CostModelError(
            f"unknown model {name!r}{hint} (presets: {', '.join(preset_ids())}; "
            "a Hugging Face config.json path, or a Hub id ORG/NAME[@REVISION], also works)"
        )
    return _parsed(f.read_text(encoding="utf-8"), f.name)


@functools.lru_cache(maxsize=64)
def _parsed(text: str, origin: str) -> ModelPreset:
    """The preset a file's ``text`` holds, parsed and validated once per text (a preset is frozen: every caller may
    share it)."""
    return _validated(load_yaml(text, origin), origin)


def load_hub_model(repo_id: str, revision: str = "main") -> ModelPreset:
    """A Hugging Face Hub model by id: its ``config.json`` from the local cache or fetched
    (:func:`costmodel.model.hub.config_path`), read as :func:`load_hf_config` reads one, named by the id."""
    from costmodel.core.files import read_text
    from costmodel.model.hf_config import hf_config_fields
    from costmodel.model.hub import config_path

    path = config_path(repo_id, revision)
    data, _ = hf_config_fields(read_text(str(path), "model config"), PurePath(repo_id, "config.json"))
    data["source"] = f"Hugging Face Hub {repo_id}@{revision} config.json ({path})"
    data["aliases"] = [repo_id]
    data["revision"] = None if revision == "main" else revision
    return _validated(data, f"{repo_id}/config.json")


def load_hf_config(path: str) -> ModelPreset:
    """A model from a Hugging Face ``config.json`` (or a folder holding one), read by
    :func:`costmodel.model.hf_config.read_hf_config` and validated as a preset."""
    from costmodel.model.hf_config import read_hf_config

    data, origin = read_hf_config(path)
    return _validated(data, origin)
