"""How fast costmodel answers: CLI wall time against a bare ``import sympy``, sweep throughput, and a
whole-model request and capacity search.

    python benchmarks/cli_speed.py [--runs 15]

Both commands run alternately in one loop, so they see the same machine load; the medians and their
ratio are printed. The sweep times the vectorised evaluation of a million-point context sweep.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()

    commands = {
        "python -c 'import sympy'": [sys.executable, "-c", "import sympy"],
        "costmodel predict --gpu a100": [sys.executable, "-m", "costmodel", "predict", "--gpu", "a100"],
        "costmodel derive --mode generate": [sys.executable, "-m", "costmodel", "derive", "--mode", "generate"],
        "costmodel capacity (llama-3-8b, 2 GPUs x 3 layouts)": [
            sys.executable,
            "-m",
            "costmodel",
            "capacity",
            "--gpu",
            "h100",
            "--gpu",
            "a100",
            "--model",
            "llama-3-8b",
            "--input-len",
            "2048",
            "--output-len",
            "512",
            "--tpot-ms",
            "50",
        ],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for name, cmd in commands.items():  # warm the file cache
        wall(cmd)
    for _ in range(args.runs):
        for name, cmd in commands.items():
            times[name].append(wall(cmd))
    base = statistics.median(times["python -c 'import sympy'"])
    print(f"CLI wall time, median of {args.runs} interleaved runs (min-max):")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"  {name:52s} {med * 1e3:7.0f} ms  ({min(ts) * 1e3:.0f}-{max(ts) * 1e3:.0f})  {med / base:4.2f}x import sympy"
        )

    import numpy as np

    from costmodel.attention.sweeps import sweep_arrays as sweep
    from costmodel.attention.workload import Workload
    from costmodel.hardware.catalog import load_profile

    hw, w = load_profile("h100"), Workload.create("gqa")
    x = np.arange(1_000_000)
    sweep(w, hw, "m", x[:10])  # compile once
    runs = []
    for _ in range(7):
        start = time.perf_counter()
        sweep(w, hw, "m", x)
        runs.append(time.perf_counter() - start)
    med = statistics.median(runs)
    print(
        f"sweep of 1,000,000 contexts (GQA decode step, H100): median {med * 1e3:.0f} ms "
        f"({x.size / med / 1e6:.1f} M points/s)"
    )

    from costmodel.model.presets import load_model
    from costmodel.model.requests import request

    m = load_model("llama-3-8b")
    for steps in (512, 131_072):
        request(m, hw, batch=8, input_len=2048, output_len=steps)  # compile once
        runs = []
        for _ in range(7):
            start = time.perf_counter()
            request(m, hw, batch=8, input_len=2048, output_len=steps)
            runs.append(time.perf_counter() - start)
        print(
            f"request of Llama 3 8B on H100, batch 8, 2048 + {steps:,} tokens (every step priced): "
            f"median {statistics.median(runs) * 1e3:.0f} ms"
        )


if __name__ == "__main__":
    main()
