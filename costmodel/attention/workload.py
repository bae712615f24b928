"""One attention workload: a variant and mode with every dimension a number, and its defaults."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.core.vocab import (
    DEFAULTS,
    MAX_DIM,
    PREDICT_MODES,
    SIDE_BY_SIDE,
    CacheAppend,
    Dtype,
    Execution,
    PredictMode,
    Variant,
    choice,
    kv_heads,
)

DIMS = ("b", "n", "m", "d", "h", "g", "k", "v")


class Workload(BaseModel):
    """One attention workload: a variant and mode with every dimension a number."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    variant: Variant
    mode: PredictMode
    b: int = Field(strict=True, ge=1, le=MAX_DIM)
    n: int = Field(strict=True, ge=1, le=MAX_DIM)
    m: int = Field(strict=True, ge=0, le=MAX_DIM)
    d: int = Field(strict=True, ge=1, le=MAX_DIM)
    h: int = Field(strict=True, ge=1, le=MAX_DIM)
    g: int = Field(strict=True, ge=1, le=MAX_DIM)
    k: int = Field(strict=True, ge=1, le=MAX_DIM)
    v: int = Field(strict=True, ge=1, le=MAX_DIM)
    dtype: Dtype = "bf16"
    layers: int = Field(default=1, strict=True, ge=1, le=MAX_DIM)
    execution: Execution = "unfused"
    cache_append: CacheAppend = "inplace"

    def __init__(self, **data):
        try:
            super().__init__(**data)
        except ValidationError as err:  # built directly: the same one error type as create()
            raise CostModelError(pydantic_message(err)) from None

    @model_validator(mode="after")
    def _heads(self) -> Workload:
        expected = kv_heads(self.variant, self.h, self.g if self.variant == "gqa" else None)
        if self.g != expected:
            raise ValueError(f"{self.variant} has g = {expected} key/value heads, got g = {self.g}")
        return self

    @classmethod
    def create(
        cls,
        variant: str = DEFAULTS["variant"],
        mode: str = DEFAULTS["mode"],
        *,
        batch: int = DEFAULTS["batch"],
        seq: int | None = None,
        context: int | None = None,
        d_model: int = DEFAULTS["d_model"],
        heads: int = DEFAULTS["heads"],
        groups: int | None = None,
        head_dim: int | None = None,
        value_dim: int | None = None,
        dtype: str = DEFAULTS["dtype"],
        layers: int = DEFAULTS["layers"],
        execution: str = DEFAULTS["execution"],
        cache_append: str = DEFAULTS["cache_append"],
    ) -> Workload:
        """A workload with the documented defaults filled in, and clear errors for bad combinations.

        Defaults: k = v = d/h; n = 4096 in batched and generate mode (1 in incremental); m = 4096 in
        incremental mode and m = n in batched mode; GQA's g = gcd(h, 8).
        """
        mode = choice("mode", mode, PREDICT_MODES)
        for name, value in (
            ("variant", variant),
            ("dtype", dtype),
            ("execution", execution),
            ("cache_append", cache_append),
        ):
            checks.text(name, value)
        for name, value in (
            ("batch", batch),
            ("seq", seq),
            ("context", context),
            ("d_model", d_model),
            ("heads", heads),
            ("groups", groups),
            ("head_dim", head_dim),
            ("value_dim", value_dim),
            ("layers", layers),
        ):
            checks.count(
                name,
                value,
                least=0 if name == "context" else 1,
                optional=name in ("seq", "context", "groups", "head_dim", "value_dim"),
            )
        g = kv_heads(variant, heads, groups)
        if mode == "generate" and context is not None:
            raise CostModelError("context does not apply in generate mode (it starts from an empty cache); use seq")
        if (head_dim is None or value_dim is None) and d_model % heads:
            raise CostModelError(f"d_model {d_model} is not divisible by heads {heads}; give head_dim and value_dim")
        n = seq if seq is not None else (1 if mode == "incremental" else DEFAULTS["seq"])
        m = (
            context
            if context is not None
            else (n if mode == "batched" else DEFAULTS["context"] if mode == "incremental" else 0)
        )
        try:
            return cls(
                variant=variant.lower(),
                mode=mode,
                b=batch,
                n=n,
                m=m,
                d=d_model,
                h=heads,
                g=g,
                k=head_dim or d_model // heads,
                v=value_dim or head_dim or d_model // heads,
                dtype=dtype.lower(),
                layers=layers,
                execution=execution.lower(),
                cache_append=cache_append.lower(),
            )
        except ValidationError as err:
            raise CostModelError(pydantic_message(err)) from None

    def dims(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in DIMS}


def pydantic_message(err: ValueError, origin: str = "") -> str:
    """The first error of a pydantic ``ValidationError`` as one line: ``field: message (got value)``."""
    errors = getattr(err, "errors", None)
    if errors is None:
        return str(err)
    first = errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    text = f"{where + ': ' if where else ''}{first['msg'].removeprefix('Value error, ')} (got {first.get('input')!r})"
    return f"{origin}: {text}" if origin else text


def workloads(
    variant: str | None = None, groups: int | None = None, mode: str = DEFAULTS["mode"], **params
) -> list[Workload]:
    """One workload per variant asked for; MHA, GQA and MQA side by side when ``variant`` is None.
    ``params`` are those of :meth:`Workload.create` (batch, context, dtype, ...)."""
    from costmodel.core.vocab import VARIANTS, check_groups

    if variant is not None:
        variant = choice("variant", variant, VARIANTS)
        check_groups(variant, groups)
    chosen = [variant] if variant else list(SIDE_BY_SIDE)
    return [Workload.create(v, mode, groups=groups if v == "gqa" else None, **params) for v in chosen]
