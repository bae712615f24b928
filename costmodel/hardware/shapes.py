"""What each kernel class's mechanisms need to know of an op besides its FLOPs and bytes: a typed shape per
class (numbers, or numpy arrays of them for a vectorised sweep or a published table).

A shape says what the kernel runs over, never what it costs; :mod:`costmodel.hardware.mechanisms` turns it into time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class GemmShape:
    """A (batched) matrix product: ``batch`` products of an M x K by a K x N matrix; ``width``: bytes per
    element (a CPU GEMM's packing passes over its K x N operand are counted in them; 0: not counted);
    ``m_blocks``: for a grouped product whose products differ in rows (skewed routing over experts), the whole
    blocks of each tile height their rows fill, each product's own (:func:`costmodel.model.ops.routed_blocks`;
    None: ``batch`` products of ``M`` rows); ``tokens``: for a grouped product, the tokens its layer's kernel is
    called on, which an engine picks the kernel's tile by (None: not a grouped product)."""

    batch: object
    M: object
    K: object
    N: object
    width: float = 0
    m_blocks: dict | None = field(default=None, compare=False)
    tokens: object = field(default=None, compare=False)

    def fields(self) -> dict:
        out = {"batch": self.batch, "M": self.M, "K": self.K, "N": self.N}
        if self.m_blocks is not None:
            out["m_blocks"] = self.m_blocks
        if self.tokens is not None:
            out["tokens"] = self.tokens
        return {**out, "width": self.width} if self.width else out


@dataclass(frozen=True)
class DecodeShape:
    """Decode attention: ``b`` sequences, ``g`` key/value heads, ``h`` query heads, ``positions`` attended
    (the new one included); ``k``: the elements of a key (and of a value) of one head (None: not given)."""

    b: object
    g: object
    h: object
    positions: object
    k: object = None

    def fields(self) -> dict:
        out = {"b": self.b, "g": self.g, "h": self.h, "positions": self.positions}
        return out if self.k is None else {**out, "k": self.k}


@dataclass(frozen=True)
class PrefillShape:
    """Prefill attention: ``b`` sequences of ``n`` queries over ``m`` positions, ``h`` query and ``g``
    key/value heads; ``write_bytes``: what writing the prompt's keys and values into the cache moves (None:
    not counted); ``window``: a sliding window (None: full causal attention); ``k``: the elements of a key (and of
    a value) of one head (None: not given)."""

    b: object
    h: object
    g: object
    n: object
    m: object
    write_bytes: object = None
    window: object = None
    k: object = None

    def fields(self) -> dict:
        out = {"b": self.b, "h": self.h, "g": self.g, "n": self.n, "m": self.m}
        for name in ("write_bytes", "window", "k"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def decode(self) -> DecodeShape:
        """The decode kernel's shape for a one-query prefill (one new position attending to its ``m``)."""
        return DecodeShape(self.b, self.g, self.h, self.m, self.k)


@dataclass(frozen=True)
class MaskShape:
    """The unfused program's mask op: the paper's ``[b, h, n, m]`` mask (``mask_bytes``), which a real kernel
    reads as one broadcast ``[n, m]`` causal mask (``broadcast_bytes``)."""

    mask_bytes: object
    broadcast_bytes: object

    def fields(self) -> dict:
        return {"mask_bytes": self.mask_bytes, "broadcast_bytes": self.broadcast_bytes}


Shape = GemmShape | DecodeShape | PrefillShape | MaskShape | None


def fields(shape) -> dict:
    """The mechanisms' view of a shape: a typed shape's fields, a dict as it is (published tables), {} for none."""
    if shape is None:
        return {}
    return shape.fields() if hasattr(shape, "fields") else shape


def one_query(shape) -> object:
    """Where a prefill shape has a single query (the engine runs the decode kernel there): a bool or an array."""
    n = fields(shape).get("n")
    return np.asarray(n) == 1 if n is not None else np.asarray(False)


__all__ = ["GemmShape", "DecodeShape", "PrefillShape", "MaskShape", "Shape", "fields", "one_query"]


#: FlashAttention-2's split-KV heuristic: at most this many splits, and ``num_splits_heuristic`` sizes them against
#: twice the SMs (its CTAs of 128 threads run two to an SM).
FA2_MAX_SPLITS, FA2_CTAS_PER_SM = 128, 2


def fa2_splits(b, g, h, positions, sms, block: int = 128) -> np.ndarray:
    """The splits FlashAttention-2 cuts a decode call's contexts into (vllm-project/flash-attention
    csrc/flash_attn/flash_api.cpp ``set_params_splitkv`` and ``num_splits_heuristic``): a call whose query heads
    share a key/value head runs the group's heads as the query rows (``seqlenq_ngroups_swapped``), so its work is
    b x g x ceil((h / g) / 64) blocks of 64 rows over ceil(positions / block) key blocks; no split where those
    blocks fill 80% of twice the SMs, else the fewest splits whose waves over twice the SMs are 85% as full as
    the fullest, among the counts that cut the key blocks differently from one fewer (at most 128, the SMs twice
    over or the key blocks). A call with as many key/value heads as query heads is not split (1)."""
    b, g, h, p = np.broadcast_arrays(*(np.asarray(x, float) for x in (b, g, h, positions)))
    units = b * g * np.ceil(h / np.maximum(g, 1) / 64)
    blocks = np.ceil(p / block)
    slots = FA2_CTAS_PER_SM * float(sms)
    s = np.arange(1, FA2_MAX_SPLITS + 1, dtype=float)
    top = np.minimum(np.minimum(FA2_MAX_SPLITS, slots), blocks)[..., None]
    nb = blocks[..., None]
    eligible = (s <= top) & ((s == 1) | (np.ceil(nb / s) != np.ceil(nb / np.maximum(s - 1, 1))))
    waves = units[..., None] * s / slots
    eff = np.where(eligible, waves / np.ceil(waves), 0.0)
    good = eligible & (eff >= 0.85 * eff.max(axis=-1, keepdims=True))
    chosen = np.where(good.any(axis=-1), np.argmax(good, axis=-1) + 1, 1).astype(float)
    return np.where((units >= 0.8 * slots) | (h == g), 1.0, chosen)
