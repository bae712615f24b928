"""Predictions held against published GPU kernel timings (no torch; the data is read from CSV files).

A folder laid out like ``../shared/measurements/`` holds tables of three sources; each file is recognised
by its name:

* aiconfigurator (NVIDIA's operator database, vLLM, CUDA-graph replay): ``<system>_<framework>_<version>_
  {generation_attention,context_attention,gemm}.csv``; latency in ms. ``<system>`` (``a100_sxm``,
  ``h100_sxm``, ``h200_sxm``, ``b200_sxm``, ``l40s``, ...) names a profile through the profiles' ids and
  aliases.
* Vidur (Microsoft, per-op CUDA kernel durations of Llama layers): ``<system>_mlp_ops.csv``; ms.
* LLMCompass (eager PyTorch, host wall time): ``{matmul,softmax,layernorm,gelu,transformer_prefill,
  transformer_decode}_<system>.csv``.

Each table becomes a :class:`Table` of one op class: shape fields, measured seconds, and the FLOPs and
bytes costmodel counts for that op, so a prediction is one vectorised :func:`costmodel.hardware.mechanisms.class_times`
call. Attention FLOPs and bytes come from the compiled fused attention programs themselves, and each
attention row carries the ``costmodel predict`` arguments whose ``--json`` prints the same time.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import numpy as np

from costmodel.core.errors import CostModelError
from costmodel.hardware.mechanisms import LOW_PRECISION_GEMM
from costmodel.hardware.op_shapes import decode_shape
from costmodel.validation.published_others import read_llmcompass, read_vidur
from costmodel.validation.tables import (
    AIC,
    AIC_DTYPES,
    LLMCOMPASS,
    SHIPPED,
    VIDUR,
    Table,
    gemm_table,
    profile_for_system,
    table_column,
    table_rows,
)


def attention_counts(mode: str, b, n, m, h, g, k):
    """(FLOPs, bytes) of the fused attention op of a bf16 program, vectorised, from the compiled program."""
    from costmodel.counts.compiled import compile_program

    compiled = compile_program("gqa", mode, "fused")
    i = compiled.names.index("attention")
    d = h * k
    flops, elements, _, _ = compiled.evaluate([b, n, m, d, h, g, k, k])
    return np.asarray(flops[i], float) * np.ones_like(b), np.asarray(elements[i], float) * 2 * np.ones_like(b)


def _variant_args(h: int, g: int) -> list[str]:
    if g == h:
        return ["--variant", "mha"]
    if g == 1:
        return ["--variant", "mqa"]
    return ["--variant", "gqa", "--groups", str(g)]


def attention_command(profile: str, mode: str, b: int, s: int, h: int, g: int, k: int) -> list[str]:
    """``costmodel predict`` arguments whose ``--json`` prints this attention op's predicted time."""
    dims = (
        ["--mode", "incremental", "--context", str(s - 1)]
        if mode == "incremental"
        else ["--mode", "batched", "--seq", str(s), "--context", str(s)]
    )
    return [
        "predict",
        "--gpu",
        profile,
        *_variant_args(h, g),
        "--heads",
        str(h),
        "--d-model",
        str(h * k),
        "--head-dim",
        str(k),
        "--value-dim",
        str(k),
        "--batch",
        str(b),
        *dims,
        "--execution",
        "fused",
        "--dtype",
        "bf16",
        "--timing",
        "graph",
    ]


def engine_of(m: re.Match) -> dict:
    """The engine and version whose kernels an aiconfigurator table timed, from its file name."""
    return {"engine": m["framework"].lower(), "engine_version": m["version"]}


def read_gemm_formats(path: Path, m: re.Match) -> list[Table]:
    """The GEMM rows of an all_dtypes (or an engines/) table, one table per format, each priced as
    ``costmodel predict --gemm`` prices it (:func:`costmodel.price.gemm.gemm_op`). An all_dtypes table holds no bf16
    rows; an engines/ table's bf16 rows are the ``gemm`` class."""
    rows = table_rows(path)
    profile = profile_for_system(m["system"])
    t = table_column(rows, "latency", path) * 1e-3
    M, N, K = (table_column(rows, c, path) for c in ("m", "n", "k"))
    kind = np.array([r["gemm_dtype"] for r in rows])
    out = []
    for dtype in ("bfloat16", *LOW_PRECISION_GEMM):
        sel = kind == dtype
        if sel.any():
            base = dict(source="aiconfigurator", gpu=m["system"], profile=profile, timing="graph", file=path.name)
            fmt = "bf16" if dtype == "bfloat16" else dtype
            out.append(
                gemm_table(
                    {"m": M[sel], "n": N[sel], "k": K[sel]}, M[sel], N[sel], K[sel], t[sel], fmt, **base, **engine_of(m)
                )
            )
    return out


#: The first vLLM whose attention backends write the new keys and values into the paged cache outside their
#: ``forward`` (``AttentionBackend.forward_includes_kv_cache_update = False``; the write runs as its own op,
#: ``unified_kv_cache_update``; vllm-project/vllm#32335, in 0.16). aiconfigurator's collector times the backend's
#: ``impl.forward`` (collector/vllm/collect_attn.py), so a prompt table of this version or later holds no cache write.
VLLM_KV_WRITE_OUTSIDE_FORWARD = (0, 16)


def _writes_cache(framework: str, version: str) -> bool:
    """Whether a timed prompt-attention call of this engine version writes the prompt's keys and values."""
    if framework != "vllm":
        return True
    parts = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    return parts < VLLM_KV_WRITE_OUTSIDE_FORWARD


#: The attention rows read from a table that holds other kinds too (an all_dtypes or an engines/ table): bf16
#: attention over a bf16 cache, no sliding window; the others (an fp8 cache, fp8 attention, a window) are left out.
BF16_ATTENTION = {"attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "window_size": "0"}


def read_aiconfigurator(path: Path, m: re.Match) -> list[Table]:
    rows = table_rows(path)
    kind = m["table"] or "gemm"
    if kind != "gemm":
        rows = [r for r in rows if all(r.get(k, v) in (v, None, "") for k, v in BF16_ATTENTION.items())]
        if not rows:
            return []
    profile = profile_for_system(m["system"])
    base = dict(
        source="aiconfigurator",
        gpu=m["system"],
        profile=profile,
        timing="graph",
        dtype="bf16",
        file=path.name,
        **engine_of(m),
    )
    t = table_column(rows, "latency", path) * 1e-3
    if kind == "gemm":
        M, N, K = (table_column(rows, c, path) for c in ("m", "n", "k"))
        return [gemm_table({"m": M, "n": N, "k": K}, M, N, K, t, **base)]
    b, h, g, k = (table_column(rows, c, path) for c in ("batch_size", "num_heads", "num_key_value_heads", "head_dim"))
    if np.any(h % g):
        raise CostModelError(f"{path}: num_key_value_heads must divide num_heads")
    fields = {"batch_size": b, "num_heads": h, "num_key_value_heads": g, "head_dim": k}
    if kind == "generation_attention":
        S = table_column(rows, "step", path)  # positions attended, the new one included
        flops, nbytes = attention_counts("incremental", b, np.ones_like(b), S - 1, h, g, k)
        return [
            Table(
                op_class="decode_attention",
                fields={**fields, "step": S},
                measured_s=t,
                flops=flops,
                nbytes=nbytes,
                shape={"b": b, "g": g, "h": h, "positions": S},
                **base,
            )
        ]
    s = table_column(rows, "isl", path)
    flops, nbytes = attention_counts("batched", b, s, s, h, g, k)
    shape = {"b": b, "h": h, "g": g, "n": s, "m": s, "k": k}
    if _writes_cache(m["framework"], m["version"]):
        shape["write_bytes"] = 2 * b * s * g * 2 * k * 2
    table = Table(
        op_class="prefill_attention",
        fields={**fields, "isl": s},
        measured_s=t,
        flops=flops,
        nbytes=nbytes,
        shape=shape,
        **base,
    )
    # a one-token prompt is one query over one position: the engine runs the decode kernel for it
    one = s == 1
    decode = table.select(one)
    decode.kernel, decode.shape = "decode_attention", decode_shape(decode.shape)
    return [t for t in (table.select(~one), decode) if len(t)]


def read_folder(folder: str | Path, engines: tuple[str, ...] | None = None) -> tuple[list[Table], list[str]]:
    """Every recognised table under ``folder`` (searched four levels deep: ``aiconfigurator/engines/<gpu>/``), and
    the files skipped; with ``engines``, only those engines' tables (and the tables of no engine: Vidur's,
    LLMCompass's)."""
    root = Path(folder)
    if not root.is_dir():
        raise CostModelError(f"published-measurements folder {folder} does not exist or is not a folder")
    files = sorted(p for depth in range(4) for p in root.glob("*/" * depth + "*.csv") if p.is_file())
    tables, skipped = [], []
    for path in files:
        if engines is not None and (m := AIC.match(path.name) or AIC_DTYPES.match(path.name)):
            if m["framework"].lower() not in engines:
                continue  # another engine's table, not read at all
        if m := AIC.match(path.name):
            tables += read_aiconfigurator(path, m)
        elif m := AIC_DTYPES.match(path.name):
            tables += read_gemm_formats(path, m)
        elif m := VIDUR.match(path.name):
            tables += read_vidur(path, m)
        elif m := LLMCOMPASS.match(path.name):
            tables += read_llmcompass(path, m)
        else:
            skipped.append(path.name)
    if not tables:
        raise CostModelError(
            f"no published table in {folder}: expected <system>_<framework>_<version>_"
            "{generation_attention,context_attention,gemm}.csv, <system>_mlp_ops.csv or "
            "{matmul,softmax,layernorm,gelu,transformer_prefill,transformer_decode}_<system>.csv files"
        )
    return tables, skipped


def shipped_folder() -> Path:
    """The compact subset of the published tables shipped inside the package."""
    return Path(str(resources.files(SHIPPED).joinpath("published")))


__all__ = [
    "read_folder",
    "shipped_folder",
    "attention_command",
    "attention_counts",
    "profile_for_system",
]
