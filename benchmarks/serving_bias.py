"""Where the served predictions are biased: the median measured / predicted TTFT and TPOT of the aggregated
deployments of a ``validate --serving --json`` report, per engine, prompt length and concurrency band (up to 16
clients, 32-64, 128 and more). A model that is right on the whole prints about 1.00 everywhere; a column that
drifts with the prompt length is a mechanism the model lacks, not noise.

    costmodel validate --serving SILICON_CSV --json REPORT.json
    python benchmarks/serving_bias.py REPORT.json SILICON_CSV

Only groups of at least four rows are printed.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np

from costmodel.validation.deployments import read

BANDS = ((16, "1-16"), (64, "32-64"), (1 << 30, "128+"))
SMALLEST = 4


def band(clients: int) -> str:
    return next(name for top, name in BANDS if clients <= top)


def main(report_path: str, csv_path: str) -> None:
    with open(report_path, encoding="utf-8") as f:
        report = json.load(f)
    deployments = {d.id: d for d in read(csv_path)[0]}
    groups: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for r in report["rows"]:
        d = deployments.get(r["id"])
        if d is None or r["mode"] != "agg":
            continue
        groups[(r["backend"], d.isl, band(d.concurrency))].append(
            (r["measured_ttft_s"] / r["predicted_ttft_s"], r["measured_tpot_s"] / r["predicted_tpot_s"])
        )
    print(f"{'engine':8s} {'prompt':>6s} {'clients':>7s} {'n':>4s}  TTFT measured/predicted  TPOT measured/predicted")
    for (engine, isl, clients), values in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1], [b for _, b in BANDS].index(kv[0][2]))
    ):
        if len(values) < SMALLEST:
            continue
        ttft, tpot = np.median(np.array(values), axis=0)
        print(f"{engine:8s} {isl:6d} {clients:>7s} {len(values):4d}  {ttft:23.2f}  {tpot:23.2f}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
