"""The published GPU kernel timings (:mod:`costmodel.validation.published`) held against the predictions: every
row predicted by its class's mechanisms on its device, rows faster than the dense-peak bound on their FLOPs
rejected, and the errors per source x GPU x engine x op class x size bin.
"""

from __future__ import annotations

import numpy as np

from costmodel.price.gemm import GEMM_FORMATS
from costmodel.validation.published import attention_command
from costmodel.validation.tables import Table


def size_bin(table: Table) -> np.ndarray:
    """The size bin of every row: GEMMs by M (decode-sized M <= 64 or not), the rest by bytes moved."""
    if table.op_class.startswith("gemm") and "M" in table.shape:
        return np.where(np.asarray(table.shape["M"]) <= 64, "M<=64", "M>64")
    b = table.nbytes
    return np.where(b < 1e6, "<1MB", np.where(b < 1e8, "1-100MB", ">=100MB"))


def roofline_bound(table: Table, hw) -> np.ndarray:
    """The least time any kernel can take: the FLOPs it must do (causal pairs only for prefill) at the
    dense peak. Bytes are not bounded by the HBM bandwidth: unflushed working sets under the L2 size
    are served from L2."""
    from costmodel.hardware.mechanisms import class_peak
    from costmodel.hardware.tiles import causal_pairs

    flops = table.flops
    if table.priced_class == "prefill_attention":  # (a one-query prefill, priced as decode, has one pair)
        n, m = table.shape["n"], table.shape["m"]
        flops = flops * causal_pairs(n, m) / np.maximum(n * m, 1)
    return flops * (table.count if table.count is not None else 1) / class_peak(hw, table.op_class, table.dtype)


def validate_published(tables: list[Table], without=()) -> dict:
    """Rows (one per published timing) and summary rows per source x GPU x engine x op class x size bin."""
    from costmodel.core.progress import bar
    from costmodel.hardware.catalog import load_profile
    from costmodel.price.origin import time_model
    from costmodel.validation.fit import errors, predict_table, unfitted_write_s

    rows, groups, rejected = [], {}, {}
    with bar(len(tables), "published tables") as advance:
        for table in tables:
            hw = load_profile(table.profile)
            model = time_model(hw, table.timing, without, engine=table.engine)
            bound = roofline_bound(table, hw)
            ok = table.measured_s >= bound * (1 - 1e-9)
            if not ok.all():
                key = f"{table.source}/{table.gpu}/{table.op_class}"
                rejected[key] = rejected.get(key, 0) + int((~ok).sum())
                table = table.select(ok)
            eff = model.resolved.get(table.priced_class) if model.active else None
            if eff is None:
                from costmodel.hardware.profile import ClassEfficiency

                eff = ClassEfficiency(fixed_s={table.timing: hw.launch_overhead})
            on = model.on if model.active else frozenset({"fixed"})
            predicted = predict_table(table, hw, eff, on=on) + unfitted_write_s(
                table, hw, eff, model.resolved.get("gemm") if model.active else None, on
            )
            error = (predicted / table.measured_s - 1) * 100
            bins = size_bin(table)
            told = _told(table, eff, on, without)
            rows += _rows(table, predicted, error, told)
            for bin_name in (*sorted(set(bins)), "all"):
                keep = np.ones(len(table), bool) if bin_name == "all" else bins == bin_name
                key = (table.source, table.gpu, table.engine or "", table.op_class, bin_name)
                g = groups.setdefault(key, [[], []])
                g[0].append(predicted[keep])
                g[1].append(table.measured_s[keep])
            advance()
    summary = []
    for (source, gpu, engine, op_class, bin_name), (pred, meas) in sorted(groups.items()):
        p, m = np.concatenate(pred), np.concatenate(meas)
        if not len(m):
            continue
        summary.append(
            {
                "source": source,
                "gpu": gpu,
                "engine": engine or None,
                "op_class": op_class,
                "size_bin": bin_name,
                **errors(p, m),
                "median_measured_over_predicted": round(float(np.median(m / p)), 3),
            }
        )
    return {"rows": rows, "summary": summary, "rejected": rejected, "mechanisms_off": sorted(set(without))}


def _rows(table: Table, predicted, error, told: list[str]) -> list[dict]:
    """One JSON row per timing of ``table``: its engine, shape, measured and predicted seconds, and for attention
    the ``costmodel predict`` command that prints its prediction (with ``told``: what the command adds)."""
    rows = []
    for i in range(len(table)):
        row = {
            "source": table.source,
            "gpu": table.gpu,
            "engine": table.engine,
            "engine_version": table.engine_version,
            "profile": table.profile,
            "op_class": table.op_class,
            **{k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in table.fields.items()},
            "measured_s": float(table.measured_s[i]),
            "predicted_s": float(predicted[i]),
            "error_pct": round(float(error[i]), 3),
        }
        if table.op_class in GEMM_CLASSES and table.count is None:
            fmt = GEMM_CLASSES[table.op_class]
            sh = table.shape
            shape = ",".join(str(int(sh[k][i])) for k in ("M", "N", "K"))
            row["command"] = ["predict", "--gpu", table.profile, "--gemm", shape, "--gemm-dtype", fmt]
            row["command"] += ["--timing", table.timing, *told]
        if table.op_class in ("decode_attention", "prefill_attention"):
            f = table.fields
            mode = "incremental" if table.op_class == "decode_attention" else "batched"
            s = int(f["step"][i]) if mode == "incremental" else int(f["isl"][i])
            row["command"] = (
                attention_command(
                    table.profile,
                    mode,
                    int(f["batch_size"][i]),
                    s,
                    int(f["num_heads"][i]),
                    int(f["num_key_value_heads"][i]),
                    int(f["head_dim"][i]),
                )
                + told
            )
        rows.append(row)
    return rows


#: The GEMM classes a row's command prices with ``predict --gemm``, and their formats.
GEMM_CLASSES = {cls: fmt for fmt, cls in GEMM_FORMATS.items()}


def _told(table: Table, eff, on, without) -> list[str]:
    """What a row's ``costmodel predict`` command adds to price the call as the table timed it: the mechanisms
    switched off, and whether the prompt call holds its cache write where the device's fit says otherwise (a table
    of an engine version that writes the cache inside the call, on a device whose parameters price none, or the
    other way round)."""
    told = [arg for name in sorted(set(without)) for arg in ("--without", name)]
    if table.engine not in (None, "vllm"):
        told += ["--kernels", table.engine]
    if table.priced_class != "prefill_attention" or "cache_write" not in on:
        return told
    holds, priced = "write_bytes" in (table.shape or {}), eff.cache_write_ceiling is not None
    if holds != priced:
        told += ["--prompt-write", "in-call" if holds else "apart"]
    return told


def summary_table(report: dict) -> str:
    from costmodel.render.text import aligned

    head = ("source", "gpu", "engine", "op class", "size", "n", "median |err|", "p90 |err|", "measured/predicted")
    body = [
        (
            s["source"],
            s["gpu"],
            s["engine"] or "-",
            s["op_class"],
            s["size_bin"],
            str(s["n"]),
            f"{s['median_abs_error_pct']:.1f}%",
            f"{s['p90_abs_error_pct']:.1f}%",
            f"{s['median_measured_over_predicted']:.2f}",
        )
        for s in report["summary"]
    ]
    lines = aligned([head, *body], right=(5, 6, 7, 8), rules=(1,))
    if report["rejected"]:
        lines.append(
            "rejected (faster than the dense-peak bound on their FLOPs): "
            + ", ".join(f"{k} {v}" for k, v in sorted(report["rejected"].items()))
        )
    else:
        lines.append("no row is faster than the dense-peak bound on its FLOPs")
    if report["mechanisms_off"]:
        lines.append("mechanisms switched off: " + ", ".join(report["mechanisms_off"]))
    return "\n".join(lines)
