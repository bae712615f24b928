"""Prices against the hardware's bound: random attention workloads and whole-model steps on every shipped profile.
price() raises PriceBoundError where an op runs faster than its precision's peak (on the kernel's own FLOPs) or
streams more than any cache holds faster than the memory's bandwidth (costmodel.price.bounds); this counts them.

    python benchmarks/price_bounds.py [--n 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random

import costmodel
from costmodel.core.errors import CostModelError
from costmodel.hardware.catalog import load_all
from costmodel.model.presets import preset_ids
from costmodel.price.bounds import PriceBoundError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    profiles, models = load_all(), [costmodel.load_model(p) for p in preset_ids()]
    priced, over = 0, []
    for _ in range(args.n):
        hw = rng.choice(profiles)
        try:
            if rng.random() < 0.5:
                w = costmodel.Workload.create(
                    rng.choice(["mha", "gqa", "mqa"]),
                    mode=rng.choice(["incremental", "batched", "generate"]),
                    batch=rng.choice([1, 4, 16, 64, 256]),
                    context=rng.choice([128, 1024, 8192, 65536]),
                    seq=rng.choice([1, 128, 1024, 4096]),
                    dtype=rng.choice(["bf16", "fp16", "fp8", "fp32"]),
                    execution=rng.choice(["fused", "unfused"]),
                )
                costmodel.predict(w, hw)
            else:
                m = rng.choice(models)
                costmodel.predict_model(
                    m, hw, batch=rng.choice([1, 8, 64, 512]), context=rng.choice([128, 4096, 32768]), tp=8
                )
        except PriceBoundError as err:
            over.append(f"{hw.id}: {err}")
            continue
        except CostModelError:
            continue
        priced += 1
    print(f"{priced} predictions priced, {len(over)} stopped at the bound")
    for line in over[:10]:
        print("  " + line[:200])


if __name__ == "__main__":
    main()
