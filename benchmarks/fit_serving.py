"""Fit each engine's two fixed costs (per iteration, and the front end's per-request delay) on measured
deployments, and report the fit's error on the models it did not see.

    python benchmarks/fit_serving.py ../shared/measurements/serving/silicon_sample_h100_sxm.csv

Every expressible row of a dense model is simulated (the mixture-of-experts rows are held out) at each
per-iteration cost of a grid, with the engine's host time as shipped (benchmarks/fit_host_time.py fits it); the
front-end delay enters a row's TTFT additively, so for each grid value its best value is found by a 1-D search,
without simulating again. The objective is the sum of absolute log errors
of TTFT and TPOT: a robust loss, whose optimum follows the typical row as the median the targets name does,
where squared log errors let the few rows no engine mechanism explains (TensorRT-LLM's small model at 128
clients, 3-10x the predicted TTFT) set the front end. Three fits are printed: on all rows (what ships in
costmodel.served.OVERHEADS), on the Qwen3 rows only (scored on the Llama rows), and on the Llama rows only
(scored on the Qwen3 rows). ``--aiperf`` predicts each row as
aiconfigurator's benchmark template runs it (2 warm-up and 50 measured requests per client) instead of the
plain closed loop of 10 requests per client.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np

from costmodel.served import OVERHEADS
from costmodel.validation.serving import predict, read

GRID_MS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0]


PROTOCOL = "aiperf" if "--aiperf" in sys.argv else "plain"


def simulate_grid(deployments):
    """Predicted (TTFT, TPOT) of each deployment at each per-iteration cost (no front-end delay)."""
    out = {}
    for i, d in enumerate(deployments):
        row = []
        for ms in GRID_MS:
            try:
                host = {k: v for k, v in OVERHEADS[d.backend].items() if k in ("layer_s", "layer_seq_s")}
                p = predict(d, {"iteration_s": ms / 1e3, "request_s": 0.0, **host}, protocol=PROTOCOL)
                row.append((p.ttft_s, p.tpot_s))
            except Exception:  # noqa: BLE001 - a row that cannot be priced is left out
                row = None
                break
        if row:
            out[d.id] = np.array(row)
        print(f"\r{i + 1}/{len(deployments)}", end="", file=sys.stderr)
    print(file=sys.stderr)
    return out


def best_delay(pred_ttft, meas_ttft):
    grid = np.linspace(0, 0.3, 601)
    err = [np.sum(np.abs(np.log((pred_ttft + g) / meas_ttft))) for g in grid]
    k = int(np.argmin(err))
    return float(grid[k]), float(err[k])


def fit(rows, preds):
    """(iteration_s, request_s) minimising absolute log errors over rows."""
    meas_ttft = np.array([d.ttft_s for d in rows])
    meas_tpot = np.array([d.tpot_s for d in rows])
    best = None
    for j, ms in enumerate(GRID_MS):
        pt = np.array([preds[d.id][j, 0] for d in rows])
        pp = np.array([preds[d.id][j, 1] for d in rows])
        delay, e_ttft = best_delay(pt, meas_ttft)
        e = e_ttft + np.sum(np.abs(np.log(pp / meas_tpot)))
        if best is None or e < best[0]:
            best = (e, ms / 1e3, delay, j)
    return best[1], best[2], best[3]


def score(rows, preds, j, delay):
    t = [abs((preds[d.id][j, 0] + delay) / d.ttft_s - 1) for d in rows]
    p = [abs(preds[d.id][j, 1] / d.tpot_s - 1) for d in rows]
    return len(rows), np.median(t), np.percentile(t, 90), np.median(p), np.percentile(p, 90)


def main(path: str) -> None:
    from costmodel.presets import load_model

    deployments, _ = read(path)
    # dense models only: the mixture-of-experts rows are held out of the fit (validate --serving scores them)
    deployments = [d for d in deployments if load_model(d.model_path).moe is None]
    preds = simulate_grid(deployments)
    deployments = [d for d in deployments if d.id in preds]
    by_engine = defaultdict(list)
    for d in deployments:
        by_engine[d.backend].append(d)
    shipped = {}
    for engine, rows in sorted(by_engine.items()):
        it, delay, j = fit(rows, preds)
        shipped[engine] = {"iteration_s": it, "request_s": delay}
        n, t50, t90, p50, p90 = score(rows, preds, j, delay)
        print(f"{engine:7s} all rows: iteration {it * 1e3:.1f} ms{' (grid bound)' if j in (0, len(GRID_MS) - 1) else ''}, "
              f"front end {delay * 1e3:.1f} ms; n {n}: TTFT {t50:.1%} (p90 {t90:.1%}), TPOT {p50:.1%} (p90 {p90:.1%})")
        for train, test in (("Qwen", "Llama"), ("Llama", "Qwen")):
            a = [d for d in rows if train.lower() in d.model_path.lower()]
            b = [d for d in rows if test.lower() in d.model_path.lower()]
            if not a or not b:
                continue
            it2, delay2, j2 = fit(a, preds)
            n, t50, t90, p50, p90 = score(b, preds, j2, delay2)
            print(f"        fitted on {train} ({len(a)} rows: {it2 * 1e3:.1f} ms, {delay2 * 1e3:.1f} ms), scored on "
                  f"{test} (n {n}): TTFT {t50:.1%} (p90 {t90:.1%}), TPOT {p50:.1%} (p90 {p90:.1%})")
    print(json.dumps(shipped, indent=1))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(args[0] if args else "../shared/measurements/serving/silicon_sample_h100_sxm.csv")
