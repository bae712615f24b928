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
from costmodel.hardware.mechanisms import LOW_PRECISION_GEMM, WEIGHT_MATH
from costmodel.hardware.op_shapes import decode_shape
from costmodel.validation.tables import AIC, AIC_DTYPES, LLMCOMPASS, SHIPPED, VIDUR, Table, table_column, table_rows


def profile_for_system(system: str) -> str:
    """The profile id a table's system id names (``a100_sxm`` -> ``a100_80gb_sxm``); an error naming the
    known ids and aliases otherwise."""
    from costmodel.hardware.catalog import load_profile, profile_index, profile_key

    if profile_key(system) not in profile_index():
        known = sorted(profile_index())
        raise CostModelError(
            f"no hardware profile for system {system!r} of a published table; known ids and aliases: {', '.join(known)}"
        )
    return load_profile(system).id


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


def read_low_precision_gemms(path: Path, m: re.Match) -> list[Table]:
    """The low-precision GEMM rows of an all_dtypes table, one table per format. fp8: inputs and weights one byte
    per element, the output in bf16. NVFP4 (vLLM's W4A4 linear layer, timed whole: it quantizes its bf16 input
    itself): bytes as a model step counts them, the input and output in bf16, the weights 4 bits with an 8-bit
    scale per 16."""
    from costmodel.model.memory import weight_width

    rows = table_rows(path)
    profile = profile_for_system(m["system"])
    t = table_column(rows, "latency", path) * 1e-3
    M, N, K = (table_column(rows, c, path) for c in ("m", "n", "k"))
    kind = np.array([r["gemm_dtype"] for r in rows])
    out = []
    for dtype, cls in LOW_PRECISION_GEMM.items():
        sel = kind == dtype
        if not sel.any():
            continue
        Ms, Ns, Ks = M[sel], N[sel], K[sel]
        if dtype == "nvfp4":
            nbytes = 2 * Ms * Ks + weight_width("nvfp4", 16) * Ks * Ns + 2 * Ms * Ns
        else:
            nbytes = Ms * Ks + Ks * Ns + 2 * Ms * Ns
        out.append(
            Table(
                source="aiconfigurator",
                gpu=m["system"],
                profile=profile,
                timing="graph",
                dtype=WEIGHT_MATH[dtype],
                file=path.name,
                op_class=cls,
                fields={"m": Ms, "n": Ns, "k": Ks},
                measured_s=t[sel],
                flops=2 * Ms * Ns * Ks,
                nbytes=nbytes,
                shape={"batch": np.ones_like(Ms), "M": Ms, "K": Ks, "N": Ns},
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


def read_aiconfigurator(path: Path, m: re.Match) -> list[Table]:
    rows = table_rows(path)
    profile = profile_for_system(m["system"])
    base = dict(source="aiconfigurator", gpu=m["system"], profile=profile, timing="graph", dtype="bf16", file=path.name)
    t = table_column(rows, "latency", path) * 1e-3
    if m["table"] == "gemm":
        M, N, K = (table_column(rows, c, path) for c in ("m", "n", "k"))
        return [
            Table(
                op_class="gemm",
                fields={"m": M, "n": N, "k": K},
                measured_s=t,
                flops=2 * M * N * K,
                nbytes=2 * (M * K + K * N + M * N),
                shape={"batch": np.ones_like(M), "M": M, "K": K, "N": N},
                **base,
            )
        ]
    b, h, g, k = (table_column(rows, c, path) for c in ("batch_size", "num_heads", "num_key_value_heads", "head_dim"))
    if np.any(h % g):
        raise CostModelError(f"{path}: num_key_value_heads must divide num_heads")
    fields = {"batch_size": b, "num_heads": h, "num_key_value_heads": g, "head_dim": k}
    if m["table"] == "generation_attention":
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


#: Engine kernels priced with their own class and reported with the op class they belong to.
REPORTED = {"activation": "elementwise", "rotary": "elementwise", "softmax": "norm", "layernorm": "norm"}


def _classes(cls: str) -> dict:
    """A table's reported op class and, where it differs, the class its kernel is priced with."""
    return {"op_class": REPORTED.get(cls, cls), "kernel": cls if cls in REPORTED else None}


#: Vidur's ops: efficiency class and (FLOPs, elements) from (tokens T, d, h, g, head dim, FFN f, TP t).
def _vidur_ops(T, d, h, g, hd, f, t):
    q, kv = h * hd / t, g * hd / t
    gemm = lambda K, N: (  # noqa: E731
        "gemm",
        2 * T * K * N,
        T * K + K * N + T * N,
        {"batch": np.ones_like(T), "M": T, "K": K, "N": N},
    )
    return {
        "attn_pre_proj": gemm(d, q + 2 * kv),
        "attn_post_proj": gemm(q, d),
        "mlp_up_proj": gemm(d, 2 * f / t),
        "mlp_down_proj": gemm(f / t, d),
        # SiLU(gate) * up: reads T x 2f/t, writes T x f/t
        "mlp_act": ("activation", 5 * T * f / t, 3 * T * f / t, {}),
        # RMSNorm: reads T x d and the d weights, writes T x d
        "input_layernorm": ("norm", 4 * T * d, 2 * T * d + d, {}),
        "post_attention_layernorm": ("norm", 4 * T * d, 2 * T * d + d, {}),
        # residual add of two T x d tensors
        "add": ("elementwise", T * d, 3 * T * d, {}),
        # rotary embedding of q and k in place, reading the cos/sin rows of every token
        "attn_rope": ("rotary", 3 * T * (q + kv), 2 * T * (q + kv) + T * hd, {}),
    }


def read_vidur(path: Path, m: re.Match) -> list[Table]:
    rows = table_rows(path)
    profile = profile_for_system(m["system"])
    cols = {
        c: table_column(rows, c, path)
        for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "num_tokens", "num_tensor_parallel_workers")
    }
    T, d, h, g, f, t = (
        cols[c]
        for c in ("num_tokens", "n_embd", "n_head", "n_kv_head", "n_expanded_embd", "num_tensor_parallel_workers")
    )
    tables = []
    by_class: dict[str, list] = {}
    for op, (cls, flops, elements, shape) in _vidur_ops(T, d, h, g, d / h, f, t).items():
        by_class.setdefault(cls, []).append(
            (op, flops, elements, shape, table_column(rows, f"time_stats.{op}.median", path) * 1e-3)
        )
    for cls, parts in by_class.items():
        cat = lambda get: np.concatenate([np.broadcast_to(get(p), T.shape) for p in parts])  # noqa: E731
        shape = {k: cat(lambda p, k=k: p[3][k]) for k in parts[0][3]}
        fields = {
            "op": np.concatenate([np.full(T.shape, p[0], dtype=object) for p in parts]),
            "num_tokens": cat(lambda p: T),
            "n_embd": cat(lambda p: d),
            "num_tensor_parallel_workers": cat(lambda p: t),
        }
        tables.append(
            Table(
                source="vidur",
                gpu=m["system"],
                profile=profile,
                **_classes(cls),
                timing="kernels",
                dtype="fp16",
                file=path.name,
                fields=fields,
                measured_s=cat(lambda p: p[4]),
                flops=cat(lambda p: p[1]),
                nbytes=2 * cat(lambda p: p[2]),
                shape=shape,
            )
        )
    return tables


def _ms(text: str) -> float:
    return float(text.strip().removesuffix("ms")) * 1e-3


#: LLMCompass's GPT-3 layer at TP 4 (d 12288, 24 heads of 128 per device), batch 8: op -> class, FLOPs,
#: elements, mechanism shape, GEMM count; prompt 2048 (prefill) or 3072 cached + 1 (decode).
def _gpt3_ops(prefill: bool):
    b, d, hh, k = 8, 12288, 24, 128
    s, m = (2048, 2048) if prefill else (1, 3073)
    T = b * s
    A = lambda a: np.asarray([a], float)  # noqa: E731
    gemm = lambda M, K, N, batch=1, c=1: (  # noqa: E731
        "gemm",
        2 * batch * M * K * N,
        batch * (M * K + K * N + M * N),
        {"batch": A(batch), "M": A(M), "K": A(K), "N": A(N)},
        c,
    )
    return {
        "Q_K_V": gemm(T, d, hh * k, c=3),
        "Q_mul_K": gemm(s, k, m, batch=b * hh),
        "A_mul_V": gemm(s, m, k, batch=b * hh),
        "Wo_proj": gemm(T, hh * k, d),
        "W1_proj": gemm(T, d, d),
        "W2_proj": gemm(T, d, d),
        "Softmax": ("softmax", 5 * b * hh * s * m, 2 * b * hh * s * m, {}, 1),
        "LayerNorm_MHA": ("layernorm", 5 * T * d, 2 * T * d, {}, 1),
        "LayerNorm_FFN": ("layernorm", 5 * T * d, 2 * T * d, {}, 1),
        "GeLU": ("elementwise", 8 * T * d, 2 * T * d, {}, 1),
    }


def read_llmcompass(path: Path, m: re.Match) -> list[Table]:
    rows = table_rows(path)
    profile = profile_for_system(m["system"].lower())
    base = dict(source="llmcompass", gpu=m["system"], profile=profile, timing="eager", dtype="fp16", file=path.name)
    table = m["table"]
    if table == "matmul":
        M, N, K = (table_column(rows, c, path) for c in ("M", "N", "K"))
        t = table_column(rows, "latency", path, _ms)
        return [
            Table(
                op_class="gemm",
                fields={"M": M, "N": N, "K": K},
                measured_s=t,
                flops=2 * M * N * K,
                nbytes=2 * (M * K + K * N + M * N),
                shape={"batch": np.ones_like(M), "M": M, "K": K, "N": N},
                **base,
            )
        ]
    if table in ("softmax", "layernorm"):
        M, N = table_column(rows, "M", path), table_column(rows, "N", path)
        t = M * N / (table_column(rows, "gelem_per_s", path) * 1e9)
        # torch's softmax and layer_norm kernels, each priced with its own class
        return [
            Table(
                **_classes(table),
                fields={"op": np.full(M.shape, table, dtype=object), "M": M, "N": N},
                measured_s=t,
                flops=5 * M * N,
                nbytes=2 * 2 * M * N,
                **base,
            )
        ]
    if table == "gelu":
        E = table_column(rows, "elements", path)
        t = E / (table_column(rows, "gelem_per_s", path) * 1e9)
        return [
            Table(
                op_class="elementwise",
                fields={"op": np.full(E.shape, "gelu", dtype=object), "elements": E},
                measured_s=t,
                flops=8 * E,
                nbytes=2 * 2 * E,
                **base,
            )
        ]
    measured = {r["op"]: float(r["latency_s"]) for r in rows}
    tables = []
    for cls in ("gemm", "layernorm", "softmax", "elementwise"):
        ops = {
            name: spec
            for name, spec in _gpt3_ops(table == "transformer_prefill").items()
            if spec[0] == cls and name in measured
        }
        if not ops:
            continue
        names = list(ops)
        cat = lambda i: np.array([float(np.ravel(ops[n][i])[0]) for n in names])  # noqa: E731
        shape = {key: np.array([float(ops[n][3][key][0]) for n in names]) for key in ops[names[0]][3]}
        tables.append(
            Table(
                **_classes(cls),
                fields={"op": np.array([f"{table}:{n}" for n in names], dtype=object)},
                measured_s=np.array([measured[n] for n in names]),
                flops=cat(1),
                nbytes=2 * cat(2),
                shape=shape,
                count=cat(4),
                **base,
            )
        )
    return tables


def read_folder(folder: str | Path) -> tuple[list[Table], list[str]]:
    """Every recognised table under ``folder`` (searched three levels deep), and the files skipped."""
    root = Path(folder)
    if not root.is_dir():
        raise CostModelError(f"published-measurements folder {folder} does not exist or is not a folder")
    files = sorted(p for p in [*root.glob("*.csv"), *root.glob("*/*.csv"), *root.glob("*/*/*.csv")] if p.is_file())
    tables, skipped = [], []
    for path in files:
        if m := AIC.match(path.name):
            tables += read_aiconfigurator(path, m)
        elif m := AIC_DTYPES.match(path.name):
            tables += read_low_precision_gemms(path, m)
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
