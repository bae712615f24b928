"""Ops priced above the hardware's bound: random attention workloads on every shipped profile, each op's FLOP rate
against the peak of its dtype and its byte rate (the bytes the table shows, over the priced time) against the
datasheet bandwidth. Prints how many ops pass either, and the first of them.

    python benchmarks/price_bounds.py [--n 600] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
from collections import Counter

import costmodel
from costmodel.core.errors import CostModelError
from costmodel.hardware.catalog import load_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    profiles = load_all()
    priced, over = 0, []
    for _ in range(args.n):
        hw, dtype = rng.choice(profiles), rng.choice(["bf16", "fp16", "fp8", "fp32"])
        try:
            w = costmodel.Workload.create(
                rng.choice(["mha", "gqa", "mqa"]),
                mode=rng.choice(["incremental", "batched", "generate"]),
                batch=rng.choice([1, 4, 16, 64]),
                context=rng.choice([128, 1024, 8192]),
                seq=rng.choice([1, 128, 1024]),
                dtype=dtype,
                execution=rng.choice(["fused", "unfused"]),
            )
            p = costmodel.predict(w, hw)
            peak = hw.peak(dtype)
        except CostModelError:  # a dtype the device has no peak for
            continue
        priced += 1
        for op in p.ops:
            if op.time_s > 0:
                flops, nbytes = op.flops / op.time_s / peak, op.bytes / op.time_s / hw.bandwidth
                if flops > 1.0001 or nbytes > 1.0001:
                    over.append((hw.id, w.variant, w.mode, w.execution, op.name, flops, nbytes))
    print(f"{priced} predictions priced, {len(over)} ops above a bound")
    print("by op:", dict(Counter(o[4] for o in over)))
    for hw, variant, mode, execution, name, flops, nbytes in over[:10]:
        print(
            f"  {hw:22s} {variant} {mode:11s} {execution:8s} {name:12s} FLOP rate {flops:.2f}x peak, "
            f"byte rate {nbytes:.2f}x bandwidth"
        )


if __name__ == "__main__":
    main()
