"""How long `costmodel plan` takes: a 70B dense model and a 600B-class mixture of experts on 8 and 16 devices of
an H100 and a B200 (requests of 2048 + 512 tokens, a 50 ms TPOT target).

    python benchmarks/plan_speed.py

Prints the wall time of each plan (one run each, the first includes the compiled programs' load), its simulated
points and front size, and the best layout.
"""

from __future__ import annotations

import time

import costmodel
from costmodel.core.errors import CostModelError


def main() -> None:
    for gpu in ("h100", "b200"):
        hw = costmodel.load_profile(gpu)
        for model in ("llama-3.1-70b", "deepseek-v3"):
            m = costmodel.load_model(model)
            for n in (8, 16):
                t = time.perf_counter()
                try:
                    p = costmodel.plan(m, [hw], devices=n, input_len=2048, output_len=512, tpot_s=0.05)
                except CostModelError as err:
                    print(f"{gpu:5s} {model:14s} {n:3d} devices  {time.perf_counter() - t:5.2f} s  {err}"[:160])
                    continue
                best = p.best[0].layout if p.best else "-"
                print(
                    f"{gpu:5s} {model:14s} {n:3d} devices  {time.perf_counter() - t:5.2f} s  "
                    f"{len(p.points):3d} points, front {len(p.front):2d}, best {best}"
                )


if __name__ == "__main__":
    main()
