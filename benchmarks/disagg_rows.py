"""The disaggregated deployments of a silicon-sample file that record no worker counts, predicted under a stated
assumption: one prefill and one decode worker of the recorded sizes. validate --serving takes it for SGLang's rows
(SGLang's own deployment: costmodel.validation.launchers.UNRECORDED_WORKERS) and refuses the others; for TensorRT-LLM's
DeepSeek-R1 rows it is known to be wrong, the same measurements appearing as DeepSeek-V3 rows with an
attention-data-parallel prefill pool and two or three decode workers. No fit saw these rows.

    python benchmarks/disagg_rows.py [SILICON_SAMPLE_CSV]

Prints, per engine and model, n and the median and p90 |error| of TTFT and TPOT and the median measured/predicted.
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from costmodel.core.errors import CostModelError
from costmodel.validation.deployments import parse
from costmodel.validation.serving import predict

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "measurements" / "serving" / "silicon_sample_h100_sxm.csv"


def main(path: Path) -> None:
    groups = defaultdict(list)
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["mode"] != "disagg" or row.get("prefill_num_workers") or row.get("decode_num_workers"):
                continue
            d = parse(row | {"prefill_num_workers": "1", "decode_num_workers": "1"})
            if isinstance(d, str):
                print(f"{row['id']}: {d}")
                continue
            try:
                p = predict(d)
            except CostModelError as err:
                print(f"{row['id']}: {err}")
                continue
            groups[(d.backend, d.model_path)].append((d.ttft_s, p.ttft_s, d.tpot_s, p.tpot_s))
    print(
        "engine  model                      n  TTFT |err| median    p90  meas/pred  TPOT |err| median    p90  meas/pred"
    )
    for (backend, model), rs in sorted(groups.items()):
        a = np.array(rs)
        ttft, tpot = np.abs(a[:, 1] / a[:, 0] - 1), np.abs(a[:, 3] / a[:, 2] - 1)
        print(
            f"{backend:7s} {model:24s} {len(rs):3d}  {np.median(ttft):17.1%}  {np.percentile(ttft, 90):5.1%}"
            f"  {np.median(a[:, 0] / a[:, 1]):9.2f}  {np.median(tpot):17.1%}  {np.percentile(tpot, 90):5.1%}"
            f"  {np.median(a[:, 2] / a[:, 3]):9.2f}"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
