"""The two evaluators on open loops: the closed form's mean TTFT and TPOT over the simulation's (3,000 Poisson
arrivals), at shares of the most the engine completes, for three engines and three models on H100s; then arrivals
beyond that most, where both say the engine is overloaded. Prints ratios (closed form / simulation).

    python benchmarks/open_loop.py
"""

from __future__ import annotations

import costmodel
from costmodel import Layout, Load
from costmodel.engine.served import serve

#: (model, tensor-parallel size, prompt tokens, output tokens)
CASES = (("llama-3.1-8b", 1, 2048, 256), ("qwen3-32b", 2, 1024, 512), ("llama-3.1-70b", 4, 4096, 256))
SHARES = (0.3, 0.6, 0.8, 0.9, 0.95)
REQUESTS = 3000


def main() -> None:
    hw = costmodel.load_profile("h100")
    print(f"closed form / simulation over {REQUESTS:,} Poisson arrivals, at shares of the engine's most (H100s):")
    print(f"  {'engine':8} {'model':14} {'most':>10}  " + "  ".join(f"{s:>13.0%}" for s in SHARES))
    for engine_name in ("vllm", "sglang", "trtllm"):
        for name, tp, isl, osl in CASES:
            m = costmodel.load_model(name)
            kw = dict(layout=Layout(tp=tp), engine_name=engine_name)
            most = serve(
                m, hw, Load(isl, osl, request_rate=1.0, num_requests=1), evaluator="steady-state", **kw
            ).saturation_requests_per_s
            cells = []
            for share in SHARES:
                load = Load(isl, osl, request_rate=share * most, num_requests=REQUESTS)
                sim = serve(m, hw, load, **kw)
                cf = serve(m, hw, load, evaluator="steady-state", **kw)
                cells.append(f"{cf.ttft_s / sim.ttft_s:.2f} / {cf.tpot_s / sim.tpot_s:.2f}")
            print(f"  {engine_name:8} {name:14} {most:6.2f}/s   " + "  ".join(f"{c:>13}" for c in cells))
    print("  (each cell: TTFT ratio / TPOT ratio)")
    print(
        f"beyond the most (1.5x), {REQUESTS:,} requests: completed requests/s over the most, and TTFT closed form / "
        "simulation"
    )
    for name, tp, isl, osl in CASES:
        m = costmodel.load_model(name)
        layout = Layout(tp=tp)
        once = Load(isl, osl, request_rate=1.0, num_requests=1)
        most = serve(m, hw, once, layout=layout, evaluator="steady-state").saturation_requests_per_s
        load = Load(isl, osl, request_rate=1.5 * most, num_requests=REQUESTS)
        sim = serve(m, hw, load, layout=layout)
        cf = serve(m, hw, load, layout=layout, evaluator="steady-state")
        print(
            f"  vllm     {name:14} overloaded {sim.overloaded}/{cf.overloaded}: simulation "
            f"{sim.requests_per_s / most:.2f} x most, closed form {cf.requests_per_s / most:.2f}; TTFT "
            f"{cf.ttft_s:.1f} s / {sim.ttft_s:.1f} s = {cf.ttft_s / sim.ttft_s:.2f}"
        )


if __name__ == "__main__":
    main()
