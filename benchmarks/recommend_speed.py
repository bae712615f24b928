"""How long ``costmodel recommend`` takes: three device kinds, every engine unit and token budget and every pair of
disaggregated worker sizes within 64 GPUs (the default), Llama 3.1 70B at 10 requests/s (2,048 + 512 tokens),
TTFT <= 2 s and TPOT <= 50 ms, means and p90s; and the same for a mixture of experts (Mixtral 8x7B). Prints the
median of three whole commands, start-up included, with the answer each gave.

    python benchmarks/recommend_speed.py
"""

from __future__ import annotations

import json
import subprocess
import sys

from serving_speed import median_time  # this folder is on the path of a script run from it

ENTRY = "import sys; from costmodel.cli.commands import main; sys.argv[0] = 'costmodel'; main()"
GPUS = ["--gpu", "h100", "--gpu", "h200", "--gpu", "b200"]
CASES = {
    "Llama 3.1 70B, means": ["--model", "llama-3.1-70b"],
    "Llama 3.1 70B, p90s": ["--model", "llama-3.1-70b", "--statistic", "p90"],
    "Mixtral 8x7B, means": ["--model", "mixtral-8x7b"],
}
LOAD = ["--input-len", "2048", "--output-len", "512", "--request-rate", "10", "--ttft-ms", "2000", "--tpot-ms", "50"]


def main() -> None:
    for name, extra in CASES.items():
        argv = [sys.executable, "-c", ENTRY, "--quiet", "recommend", *GPUS, *extra, *LOAD, "--json"]
        out = {}

        def run(argv=argv, out=out):
            out["r"] = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)

        t = median_time(run, runs=3)
        r = out["r"]
        print(f"{name}: {t:.1f} s (median of 3); answer {r['gpus']} x {r['gpu']}, {r['layout']}")


if __name__ == "__main__":
    main()
