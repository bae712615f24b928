"""Collective curves fitted on published timings (aiconfigurator's ``comm/`` tables: NCCL's all-reduce,
all-gather, reduce-scatter and all-to-all, and vLLM's custom all-reduce inside and outside a CUDA graph), and
their errors on the tables they saw and on other devices'.

A line of one collective over ``n`` GPUs is ``t(S) = latency + v (n - 1) / n * S / bus_bandwidth`` for a
buffer of ``S`` bytes (NCCL's size: the all-reduce's buffer, the all-gather's output, the reduce-scatter's
input, the all-to-all's send buffer): a fixed cost per call (synchronisation and the kernel's start) and the
data each GPU moves at an effective bus bandwidth (NCCL's "busbw"), ``v`` = 2 for an all-reduce (a
reduce-scatter and an all-gather) and 1 for the others. A curve is one line, or the faster of two at each size
(NCCL's tuner picks the protocol and algorithm its latency-plus-bandwidth model finds fastest for the size;
vLLM's custom all-reduce runs one-shot for small buffers and two-shot for large): two or four numbers per
collective and GPU count, fitted by least squares on log time. A device without tables takes a measured device's
latencies and scales its bus bandwidths by the ratio of the datasheet interconnect bandwidths (the transfer
rule).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

#: The tables and the implementation each row's kernel_source/backend names.
TABLES = {
    "a100_80gb_sxm": ("a100_sxm_nccl_2.27.3_nccl_perf.csv", "a100_sxm_vllm_0.14.0_custom_allreduce_perf.csv"),
    "h100_sxm": ("h100_sxm_nccl_2.27.3_nccl_perf.csv", "h100_sxm_vllm_0.19.0_custom_allreduce_perf.csv"),
    "b200": ("b200_sxm_nccl_2.29.2_nccl_perf.csv", "b200_sxm_vllm_0.19.0_custom_allreduce_perf.csv"),
}
IMPLEMENTATIONS = ("nccl", "custom_graph", "custom_eager")
#: NCCL's other collectives (the tables' op_name -> costmodel's) and the share of the buffer each GPU moves
#: per (n - 1) / n.
NCCL_OPS = {"all_gather": "all_gather", "reduce_scatter": "reduce_scatter", "alltoall": "all_to_all"}
VOLUME = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "all_to_all": 1}
_BYTES = {"half": 2, "bfloat16": 2, "float16": 2, "int8": 1, "float": 4, "float32": 4}


def _collect(folder: str | Path, names, key_of) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """(key, GPUs) -> (message bytes, seconds) of the rows of the tables ``names`` that ``key_of`` keeps: it gives
    a row's (key, dtype), or None to leave the row out."""
    out: dict = {}
    for name in names:
        with open(Path(folder) / name, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                found = key_of(row)
                if found is None:
                    continue
                sizes, seconds = out.setdefault((found[0], int(row["num_gpus"])), ([], []))
                sizes.append(int(row["message_size"]) * _BYTES[found[1]])
                seconds.append(float(row["latency"]) / 1e3)
    return {k: (np.array(v[0], float), np.array(v[1], float)) for k, v in out.items()}


def _all_reduce_row(row: dict) -> tuple[str, str] | None:
    """An all-reduce row's implementation and dtype (NCCL: its 16-bit rows only)."""
    if row["op_name"] != "all_reduce":
        return None
    if row.get("backend"):
        return {"vllm_graph": "custom_graph", "vllm_eager": "custom_eager"}[row["backend"]], row["allreduce_dtype"]
    return ("nccl", "half") if row["nccl_dtype"] == "half" else None


def read_tables(folder: str | Path, profile: str) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """(implementation, GPUs) -> (message bytes, seconds) of the all-reduce rows (NCCL: 16-bit rows only)."""
    return _collect(folder, TABLES[profile], _all_reduce_row)


def read_nccl_ops(folder: str | Path, profile: str) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """(collective, GPUs) -> (buffer bytes, seconds) of NCCL's all-gather, reduce-scatter and all-to-all rows
    (16-bit rows)."""
    return _collect(
        folder,
        TABLES[profile][:1],
        lambda row: (
            (NCCL_OPS[row["op_name"]], "half") if row["op_name"] in NCCL_OPS and row["nccl_dtype"] == "half" else None
        ),
    )


def curve(size, n: int, c, volume: int = 2, scale: float = 1.0):
    """Seconds of the collective curve ``c`` (a CollectiveCurve, or a dict of its fields) for buffers of ``size``
    bytes over ``n`` GPUs, its bus bandwidths times ``scale``."""
    from costmodel.hardware.profile import CollectiveCurve

    c = c if isinstance(c, CollectiveCurve) else CollectiveCurve(**c)
    transfer, latency = c.parts(volume * (n - 1) / n * np.asarray(size, float), scale)
    return transfer + latency


def _line(moved: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """(latency, bus bandwidth) of one line minimising squared log error: a grid over both."""
    lat = np.geomspace(seconds.min() * 0.05, seconds.min() * 1.2, 120)[:, None, None]
    bus = np.geomspace(1e9, 2e13, 400)[None, :, None]
    err = np.sum(np.log((lat + moved / bus) / seconds) ** 2, axis=2)
    i, j = np.unravel_index(np.argmin(err), err.shape)
    return float(lat[i, 0, 0]), float(bus[0, j, 0])


def _stored(c: dict) -> dict:
    """A curve as a profile stores it: four significant figures."""
    return {k: float(f"{v:.4g}") for k, v in c.items()}


#: The fewest rows each line of a two-line curve is fitted on.
MIN_LINE_ROWS = 3
#: Two lines are kept only where they cut one line's squared log error by at least this factor: a second protocol
#: the timings show, not the fit grid's rounding.
TWO_LINES_GAIN = 2.0


def fit_curve(size: np.ndarray, seconds: np.ndarray, n: int, volume: int = 2) -> dict:
    """The curve of one table: one line (latency, bus bandwidth), or two where the faster of two fits better (the
    small buffers' line with less latency and less bandwidth, the large buffers' with more of both): every split
    of the sizes into a small and a large part is fitted line by line, and the split whose two lines, the faster
    taken at each size, give the least squared log error over all rows is kept, if it cuts one line's by
    :data:`TWO_LINES_GAIN` or more."""
    moved = volume * (n - 1) / n * np.asarray(size, float)
    seconds = np.asarray(seconds, float)
    lat, bus = _line(moved, seconds)
    best = _stored({"latency_s": lat, "bus_bytes_per_s": bus})
    one = least = np.sum(np.log(curve(size, n, best, volume) / seconds) ** 2)
    order = np.argsort(moved, kind="stable")
    for k in range(MIN_LINE_ROWS, len(order) - MIN_LINE_ROWS + 1):
        small, large = order[:k], order[k:]
        (l1, b1), (l2, b2) = _line(moved[small], seconds[small]), _line(moved[large], seconds[large])
        if not (l1 < l2 and b1 < b2):  # not a crossing: one line would be the faster everywhere
            continue
        two = _stored({"latency_s": l1, "bus_bytes_per_s": b1, "large_latency_s": l2, "large_bus_bytes_per_s": b2})
        err = np.sum(np.log(curve(size, n, two, volume) / seconds) ** 2)
        if err < least and err * TWO_LINES_GAIN <= one:
            best, least = two, err
    return best


def errors(size, seconds, n, c, volume: int = 2, scale: float = 1.0) -> tuple[int, float, float]:
    """(rows, median, p90) of the curve ``c``'s absolute error on a table, in per cent."""
    e = np.abs(curve(size, n, c, volume, scale) / seconds - 1) * 100
    return len(e), float(np.median(e)), float(np.percentile(e, 90))


def fit_device(folder, profile: str) -> dict:
    """Every curve of a device's tables and its error on them: the all-reduce implementations (``curves``) and
    NCCL's other collectives (``ops``)."""
    out = {"curves": {}, "ops": {}, "error": {}}
    for part, tables in (("curves", read_tables(folder, profile)), ("ops", read_nccl_ops(folder, profile))):
        for (name, n), (size, sec) in sorted(tables.items()):
            volume = VOLUME.get(name, 2)
            c = fit_curve(size, sec, n, volume)  # as the profile stores it
            out[part].setdefault(name, {})[n] = c
            k, med, p90 = errors(size, sec, n, c, volume)
            out["error"][f"{name}/{n}"] = {"n": k, "median_abs_error_pct": med, "p90_abs_error_pct": p90}
    return out
