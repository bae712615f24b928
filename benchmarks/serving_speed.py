"""How long a served-model prediction takes: 1,000 requests simulated (the iteration table built once, then
reused), the closed form, a whole ``costmodel predict --engine`` run, and capacity searches. Prints medians.

    python benchmarks/serving_speed.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import costmodel
from costmodel import Layout, Load
from costmodel.engine.served import serve


def median_time(fn, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    hw = costmodel.load_profile("h100")
    m = costmodel.load_model("Qwen/Qwen3-32B")
    kw = dict(load=Load(1024, 512, concurrency=64, num_requests=1000), engine_name="vllm", layout=Layout(tp=2))
    t0 = time.perf_counter()
    serve(m, hw, **kw)
    first = time.perf_counter() - t0
    sim = median_time(lambda: serve(m, hw, **kw))
    cf = median_time(lambda: serve(m, hw, **kw, evaluator="steady-state"))
    cmd = [
        "costmodel",
        "predict",
        "--gpu",
        "h100",
        "--model",
        "Qwen/Qwen3-32B",
        "--tp",
        "2",
        "--engine",
        "vllm",
        "--concurrency",
        "64",
        "--input-len",
        "1024",
        "--output-len",
        "512",
        "--num-requests",
        "1000",
    ]
    cli = median_time(lambda: subprocess.run(cmd, check=True, capture_output=True), runs=3)
    from costmodel.deploy.capacity import highest_rate, largest_concurrency

    cap = dict(requests=Load(2048, 512), tpot_s=0.05, ttft_s=0.5)
    l8 = costmodel.load_model("llama-3.1-8b")
    mean_search = median_time(lambda: largest_concurrency(l8, hw, **cap), runs=3)
    p90_search = median_time(lambda: largest_concurrency(l8, hw, statistic="p90", **cap), runs=3)
    rate_mean = median_time(lambda: highest_rate(l8, hw, **cap), runs=3)
    rate_p90 = median_time(lambda: highest_rate(l8, hw, statistic="p90", **cap), runs=3)
    print("1,000 requests, Qwen3-32B on 2 x H100 under vLLM at concurrency 64 (1024 + 512 tokens):")
    print(f"  simulation, first call (iteration table built): {first:.2f} s")
    print(f"  simulation, table reused (median of 5):          {sim:.2f} s")
    print(f"  steady-state closed form (median of 5):          {cf * 1e3:.1f} ms")
    print(f"  costmodel predict, whole process (median of 3):  {cli:.2f} s")
    print("capacity search, Llama 3.1 8B on an H100 under vLLM (2048 + 512 tokens, TPOT <= 50 ms, TTFT <= 500 ms):")
    print(f"  means, closed form (median of 3):                {mean_search:.2f} s")
    print(f"  p90, simulation (median of 3):                   {p90_search:.2f} s")
    print(f"  request rate, means (median of 3):               {rate_mean:.2f} s")
    print(f"  request rate, p90, 1,000 requests a rate:        {rate_p90:.2f} s")
    from costmodel.deploy.disagg import Pool, serve_disaggregated

    dis = dict(load=Load(1024, 512, concurrency=64, num_requests=1000), prefill=Pool(workers=2), decode=Pool(tp=2))
    dis_sim = median_time(lambda: serve_disaggregated(m, hw, **dis))
    dis_cf = median_time(lambda: serve_disaggregated(m, hw, **dis, evaluator="steady-state"))
    print(
        "1,000 requests disaggregated, Qwen3-32B: 2 prefill workers of 1 H100, 1 decode worker of 2 (concurrency 64):"
    )
    print(f"  simulation (median of 5):                        {dis_sim:.2f} s")
    print(f"  steady-state closed form (median of 5):          {dis_cf * 1e3:.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
