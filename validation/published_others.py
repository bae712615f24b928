"""The published tables of Vidur (per-op CUDA kernel durations of Llama layers) and LLMCompass (eager PyTorch, host
wall time), each as :class:`costmodel.validation.tables.Table` rows of one op class (:mod:`costmodel.validation.published`
reads the folder)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from costmodel.validation.tables import Table, gemm_table, profile_for_system, table_column, table_rows

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
        return [gemm_table({"M": M, "N": N, "K": K}, M, N, K, t, **base)]
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
