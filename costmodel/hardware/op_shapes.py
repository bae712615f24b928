"""The shape each kernel class's mechanisms take of an op (:mod:`costmodel.hardware.shapes`), built from its dimensions."""

from __future__ import annotations

import numpy as np

from costmodel.hardware.mechanisms import GEMMS
from costmodel.hardware.shapes import DecodeShape, GemmShape, MaskShape, PrefillShape


def decode_shape(prefill):
    """The decode kernel's shape for a one-query prefill (one new position attending to its ``m``): a typed
    :class:`costmodel.hardware.shapes.DecodeShape`, or a dict of a published table's columns for a dict."""
    if hasattr(prefill, "decode"):
        return prefill.decode()
    return {"b": prefill["b"], "g": prefill["g"], "h": prefill["h"], "positions": prefill["m"]}


def op_shape(cls: str, dims: dict, mode: str, gemm: dict | None, name: str = "", width: int = 0):
    """The typed shape a class's mechanisms need (:mod:`costmodel.hardware.shapes`), from a workload's dimensions."""

    if name == "mask" and width:
        # the paper's [b, h, n, m] mask; a real kernel broadcasts one [n, m] causal mask
        n, m = dims["n"], dims["m"]
        return MaskShape(dims["b"] * dims["h"] * n * m * width, n * m * width)
    if cls in GEMMS:
        return GemmShape(**gemm, width=width) if gemm else None
    if cls == "decode_attention":
        positions = dims["n"] if mode == "generate" else np.asarray(dims["m"]) + 1
        return DecodeShape(dims["b"], dims["g"], dims["h"], positions, dims.get("k"))
    if cls == "prefill_attention":
        # the cache write reads the n new keys and values of every key/value head and writes them
        kv = dims["g"] * (dims["k"] + dims.get("v", dims["k"]))
        return PrefillShape(
            dims["b"],
            dims["h"],
            dims["g"],
            dims["n"],
            dims["m"],
            write_bytes=2 * np.asarray(dims["b"]) * dims["n"] * kv * width,
            k=dims["k"],
        )
    return None
