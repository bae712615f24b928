"""What pricing energy adds to a served prediction's time: the same serves on an H100 profile with its power block
and on a copy without one (which prices no energy, every other field alike), alternated so that both see the same
machine. Cold: the iteration table built (each op's work energies are gathered as its times are); warm: the table
kept, each run's operating point and its three corners of the constants. Prints medians and their ratios.

    python benchmarks/energy_cost.py
"""

from __future__ import annotations

import statistics
import time

import costmodel
from costmodel import Load
from costmodel.engine import served
from costmodel.engine.served import serve

LOADS = [Load(1024, 256, concurrency=c, num_requests=300) for c in (1, 8, 32, 128)] + [
    Load(1024, 256, request_rate=r, num_requests=300) for r in (2, 8)
]


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _cold(m, hw) -> float:
    served._TABLES.clear()
    return _timed(lambda: serve(m, hw, LOADS[2]))


def _warm(m, hw, evaluator: str) -> float:
    return _timed(
        lambda: [
            serve(m, hw, load, evaluator=evaluator) for load in LOADS if evaluator == "simulation" or load.concurrency
        ]
    )


def main(runs: int = 15) -> None:
    m = costmodel.load_model("meta-llama/Llama-3.1-8B")
    with_power = costmodel.load_profile("h100")
    without = with_power.model_copy(update={"power": None})
    assert serve(m, without, LOADS[0]).power_w is None and serve(m, with_power, LOADS[0]).power_w is not None
    cases = {
        "cold: one serve, the table built": _cold,
        "warm: six simulated serves": lambda m, hw: _warm(m, hw, "simulation"),
        "warm: four closed-form serves": lambda m, hw: _warm(m, hw, "steady-state"),
    }
    print(f"Llama 3.1 8B on an H100, 1024 + 256 tokens; medians of {runs} alternated runs")
    for name, case in cases.items():
        case(m, with_power), case(m, without)  # warm both up
        times = {"energy": [], "none": []}
        for _ in range(runs):
            times["energy"].append(case(m, with_power))
            times["none"].append(case(m, without))
        a, b = statistics.median(times["energy"]), statistics.median(times["none"])
        print(f"  {name}: {a * 1e3:.2f} ms with energy, {b * 1e3:.2f} ms without, ratio {a / b:.3f}")


if __name__ == "__main__":
    main()
