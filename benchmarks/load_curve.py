"""How long a 12-point load curve of one configuration takes: ``costmodel predict`` over concurrencies 1 to
2,048 (doubling) and 1 to 256, Qwen3-32B on 2 x H100 under vLLM (1024 + 512 tokens), the whole command
(start-up included) and its points in this process one after the other. Prints medians of three runs.

    python benchmarks/load_curve.py
"""

from __future__ import annotations

import subprocess
import sys
import time

from serving_speed import median_time  # this folder is on the path of a script run from it

import costmodel
from costmodel import Layout, Load
from costmodel.engine.served import serve

ENTRY = "import sys; from costmodel.cli.commands import main; sys.argv[0] = 'costmodel'; main()"
COMMAND = "predict --gpu h100 --model Qwen/Qwen3-32B --tp 2 --engine vllm --input-len 1024 --output-len 512 --json"


def main() -> None:
    hw, m = costmodel.load_profile("h100"), costmodel.load_model("Qwen/Qwen3-32B")
    for top in (2048, 256):
        loads = [2**k for k in range(12)] if top == 2048 else [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256]
        spec = ",".join(map(str, loads))
        argv = [sys.executable, "-c", ENTRY, "--quiet", *COMMAND.split(), "--concurrency", spec]
        whole = median_time(lambda: subprocess.run(argv, check=True, capture_output=True), runs=3)
        each = {}
        for c in loads:
            t = time.perf_counter()
            serve(m, hw, Load(1024, 512, concurrency=c), layout=Layout(tp=2), engine_name="vllm")
            each[c] = time.perf_counter() - t
        print(f"concurrency {spec}:")
        print(f"  costmodel {COMMAND} --concurrency {spec}: {whole:.2f} s (median of 3)")
        print(f"  the points one after the other in one process: {sum(each.values()):.2f} s; slowest", end=" ")
        print(", ".join(f"{c}: {t:.2f} s" for c, t in sorted(each.items(), key=lambda kv: -kv[1])[:3]))


if __name__ == "__main__":
    main()
