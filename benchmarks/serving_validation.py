"""How long `costmodel validate --serving` takes on 5,000 deployment rows (the published H100 file's rows, cycled),
over every core and in one process. Prints; asserts nothing.

    python benchmarks/serving_validation.py [FILE] [ROWS]
"""

from __future__ import annotations

import csv
import os
import sys
import tempfile
import time
from pathlib import Path

from costmodel.validation.serving import validate_serving

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT.parent / "shared" / "measurements" / "serving" / "silicon_sample_h100_sxm.csv"


def main() -> None:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else FILE
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    with source.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields, data = reader.fieldnames, list(reader)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "deployments.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            for i in range(rows):
                writer.writerow(data[i % len(data)])
        for workers in (os.cpu_count(), 1) if "--both" in sys.argv else (os.cpu_count(),):
            t = time.perf_counter()
            report = validate_serving(path, workers=workers)
            print(
                f"{rows:,} rows ({len(report['rows']):,} priced) over {workers} process(es): "
                f"{time.perf_counter() - t:.1f} s"
            )


if __name__ == "__main__":
    main()
