"""An engine's limits on a request that no scheduling changes: its model length (``max_model_len``)."""

from __future__ import annotations

from costmodel.core.errors import CostModelError
from costmodel.engine.config import (
    EngineConfig,
)


def model_len(eng: EngineConfig, setup, prompts, outputs) -> None:
    """An engine with a model length (``max_model_len``) refuses a longer request, and refuses to start when one
    request that long does not fit its KV cache (vLLM's check at start-up: "The model's max seq len ... is larger
    than the maximum number of tokens that can be stored in KV cache"); ``setup``: the engine on its device,
    :class:`costmodel.engine.served.Setup`)."""
    limit = eng.max_model_len
    if limit is None:
        return
    name = eng.FLAGS["max_model_len"][eng.name]
    longest = int((prompts + outputs).max())
    if longest > limit:
        raise CostModelError(
            f"a request of {longest:,} tokens (prompt and output) is longer than {name} {limit:,}: {eng.name} refuses it"
        )
    if limit > setup.kv_tokens:
        raise CostModelError(
            f"{name} {limit:,} is more than the {setup.kv_tokens:,} tokens the KV cache holds on this device: "
            f"{eng.name} does not start; lower {name} or give the cache more memory"
        )
