"""Peak memory and wall time of long attention sweeps, to CSV and as figures: memory must not grow with the points.

    python benchmarks/sweep_memory.py [--points 100000 1000000 10000000] [--figures 100000 1000000]

Each sweep runs in its own process and prints its peak resident memory (ru_maxrss) and wall time: `costmodel
predict --gpu a100 --variant mqa --sweep context=1:N:1 --max-points N --csv FILE`, and `costmodel sweep --gpu
a100 --x context --range 1:N:1 --max-points N` drawn to a PNG and to an HTML page (three variants each), beside
the same sweep with its rows also written to CSV.
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
n, out, kind = int(sys.argv[1]), sys.argv[2], sys.argv[3]
start = time.perf_counter()
if kind == "predict":
    args = ["predict", "--gpu", "a100", "--variant", "mqa", "--sweep", f"context=1:{n}:1", "--max-points", str(n),
            "--csv", out]
else:
    args = ["sweep", "--gpu", "a100", "--x", "context", "--range", f"1:{n}:1", "--max-points", str(n)]
    args += {"png": ["--out", out], "html": ["--html", out], "csv": ["--out", out + ".png", "--csv", out]}[kind]
main(args, standalone_mode=False)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, time.perf_counter() - start)
"""


def peak(points: int, kind: str = "predict") -> tuple[float, float, int]:
    """(peak resident bytes, seconds, rows written to the CSV or bytes of the figure) of one sweep of ``points``
    contexts."""
    suffix = {"predict": ".csv", "png": ".png", "html": ".html", "csv": ".csv"}[kind]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / f"sweep{suffix}"
        result = subprocess.run(
            [sys.executable, "-c", CHILD, str(points), str(out), kind], capture_output=True, text=True, check=True
        )
        nbytes, seconds = (float(x) for x in result.stdout.split()[-2:])
        if suffix == ".csv":
            with out.open("rb") as f:
                return nbytes, seconds, sum(1 for _ in f) - 1
        return nbytes, seconds, out.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, nargs="*", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--figures", type=int, nargs="*", default=[100_000, 1_000_000])
    args = parser.parse_args()
    for points in args.points:
        nbytes, seconds, size = peak(points)
        print(f"predict --sweep to CSV {points:>10,} points: peak {nbytes / 2**20:7.0f} MiB, {seconds:6.1f} s")
    for points in args.figures:
        got = {kind: peak(points, kind) for kind in ("csv", "png", "html")}
        for kind, (nbytes, seconds, _) in got.items():
            ratio = nbytes / got["csv"][0]
            print(
                f"sweep to {kind.upper():4s} {points:>10,} points x 3 variants: peak {nbytes / 2**20:7.0f} MiB "
                f"({ratio:.2f}x the run with the CSV too), {seconds:6.1f} s"
            )


if __name__ == "__main__":
    main()
