"""Peak memory and wall time of long attention sweeps written to CSV: memory must not grow with the points.

    python benchmarks/sweep_memory.py [--points 100000 1000000 10000000]

Each sweep runs in its own process (`costmodel predict --gpu a100 --variant mqa --sweep context=1:N:1
--max-points N --csv FILE`) and prints its peak resident memory (ru_maxrss) and wall time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import resource, sys, time
from costmodel.cli.commands import main
n, out = int(sys.argv[1]), sys.argv[2]
start = time.perf_counter()
main(["predict", "--gpu", "a100", "--variant", "mqa", "--sweep", f"context=1:{n}:1", "--max-points", str(n),
      "--csv", out], standalone_mode=False)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, time.perf_counter() - start)
"""


def peak(points: int) -> tuple[float, float, int]:
    """(peak resident bytes, seconds, rows written) of one sweep of ``points`` contexts to CSV."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "sweep.csv"
        result = subprocess.run(
            [sys.executable, "-c", CHILD, str(points), str(out)], capture_output=True, text=True, check=True
        )
        nbytes, seconds = (float(x) for x in result.stdout.split()[-2:])
        with out.open("rb") as f:
            rows = sum(1 for _ in f) - 1
    return nbytes, seconds, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    for points in parser.parse_args().points:
        nbytes, seconds, rows = peak(points)
        print(f"{points:>10,} points: peak {nbytes / 2**20:7.0f} MiB, {seconds:6.1f} s, {rows:,} rows written")


if __name__ == "__main__":
    main()
