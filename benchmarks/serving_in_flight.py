"""How many requests each measured engine ran at once, by Little's law on the row's own means, next to the
prediction's: where the served TTFT is far off, is it the engine's arithmetic or requests held back?

For each aggregated deployment of a ``validate --serving --json`` report, the requests decoding at once,
clients x decode time / (TTFT + decode time) with decode time = (output tokens - 1) x TPOT
(``costmodel.validation.serving.decoding_requests``), from the measured means and from the predicted ones, as a
share of the slots the engine had: its batch (times its replicas), at most its clients. A measured share well
below the predicted one means the measured requests spent their TTFT waiting, in the engine's queue, its front end
or the benchmark client, while the prediction decoded them; the kernels and the model step cannot close that gap.

    costmodel validate --serving SILICON_CSV --json REPORT.json
    python benchmarks/serving_in_flight.py REPORT.json SILICON_CSV

Prints the rows whose TTFT is off by more than 50%, grouped per engine, model and clients, then how many of them,
and of the other rows, were held back (measured share below 0.8 while the predicted is at least 0.8).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np

from costmodel.validation.deployments import read
from costmodel.validation.serving import decoding_requests

FAR = 0.5  # |predicted / measured - 1| of TTFT beyond which a row is far off
FULL = 0.8  # share of the slots decoding at or above which an engine ran its batch full


def shares(row: dict, d) -> tuple[float, float]:
    """(measured, predicted) requests decoding at once as a share of the engine's slots."""
    slots = min(d.concurrency, d.layout.batch * d.layout.replicas) if d.layout.batch else d.concurrency
    measured = decoding_requests(d.concurrency, row["measured_ttft_s"], row["measured_tpot_s"], d.osl)
    predicted = decoding_requests(d.concurrency, row["predicted_ttft_s"], row["predicted_tpot_s"], d.osl)
    return measured / slots, predicted / slots


def main(report_path: str, csv_path: str) -> None:
    with open(report_path, encoding="utf-8") as f:
        report = json.load(f)
    deployments = {d.id: d for d in read(csv_path)[0]}
    far: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    held = {True: [0, 0], False: [0, 0]}  # far off or not: [held back, rows]
    for r in report["rows"]:
        d = deployments.get(r["id"])
        if d is None or r["mode"] != "agg" or d.layout is None:
            continue
        measured, predicted = shares(r, d)
        off = abs(r["predicted_ttft_s"] / r["measured_ttft_s"] - 1) > FAR
        held[off][0] += measured < FULL <= predicted
        held[off][1] += 1
        if off:
            far[(r["backend"], r["model_path"], d.concurrency)].append((measured, predicted))
    print(
        f"aggregated rows with TTFT off by more than {FAR:.0%}: requests decoding at once / the engine's slots (median)"
    )
    print(f"{'engine':8s} {'model':34s} {'clients':>7s} {'n':>3s}  {'measured':>8s}  {'predicted':>9s}")
    for (engine, model, clients), values in sorted(far.items()):
        m, p = np.median(np.array(values), axis=0)
        print(f"{engine:8s} {model:34s} {clients:7d} {len(values):3d}  {m:8.2f}  {p:9.2f}")
    for off, label in ((True, f"off by more than {FAR:.0%}"), (False, f"within {FAR:.0%}")):
        k, n = held[off]
        print(f"rows {label}: {k} of {n} held requests back (measured share below {FULL}, predicted at least {FULL})")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
