"""Fit each engine's two fixed costs (per iteration, and the front end's per-request delay) on measured
deployments, and report the fit's error on the models it did not see.

    python scripts/fit_serving.py ../shared/measurements/serving/silicon_sample_h100_sxm.csv

Every expressible row of a dense model is simulated (the aggregated mixture-of-experts rows are held out, and
scored with the fit) at each
per-iteration cost of a grid, with the engine's host time as shipped (scripts/fit_host_time.py fits it); the
front-end delay enters a row's TTFT additively, so for each grid value its best value is found by a 1-D search,
without simulating again. The objective is the sum of absolute percentage errors
of TTFT and TPOT, |predicted / measured - 1|: the statistic the error tables report and the targets name (and the
one aiconfigurator's own accuracy tests score), a robust loss whose optimum follows the typical row, where squared
errors let the few rows no engine mechanism explains (TensorRT-LLM's small model at 128 clients, 3-10x the
predicted TTFT) set the front end. ``--log`` fits absolute log errors instead, |log(predicted / measured)|, which
weigh a prediction at half the measured as one at twice it: there the rows predicted at a third or less of their
measured TTFT pull the front end up, over the many rows it then over-predicts. The per-iteration cost is the
engine's; the front-end delay is fitted apart for each front end its rows passed (Dynamo's, or the engine's own
server: validation.launchers.launched_by_dynamo). Three fits are printed: on all rows (what ships in
costmodel.engine.served.OVERHEADS and ENGINE_FRONT_END_S), on the Qwen3 rows only (scored on the Llama rows), and on the
Llama rows only (scored on the Qwen3 rows), where the scored rows passed a front end the fit saw. ``--aiperf``
predicts each row as aiconfigurator's benchmark template runs it (2 warm-up and 50 measured requests per client)
instead of the plain closed loop of 10 requests per client.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np

from costmodel.engine.served import OVERHEADS
from costmodel.validation.deployments import read
from costmodel.validation.serving import predict

GRID_MS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0]


PROTOCOL = "aiperf" if "--aiperf" in sys.argv else "plain"
LOG_LOSS = "--log" in sys.argv


def loss(ratio):
    """A row's error, predicted / measured -> its share of the objective (see the module's docstring)."""
    return np.abs(np.log(ratio)) if LOG_LOSS else np.abs(ratio - 1)


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


#: The front-end delays searched (seconds): 0 to 300 ms in steps of 0.5 ms.
DELAY_GRID = np.linspace(0, 0.3, 601)


def best_delay(pred_ttft, meas_ttft):
    err = [np.sum(loss((pred_ttft + g) / meas_ttft)) for g in DELAY_GRID]
    k = int(np.argmin(err))
    return float(DELAY_GRID[k]), float(err[k])


def fit(rows, preds):
    """(iteration_s, {front end: request_s}, grid index) minimising the rows' errors (:func:`loss`): one per-iteration
    cost for the engine, one front-end delay for each front end its rows passed (Dynamo's, or the engine's own
    server: costmodel.engine.served.FRONTENDS)."""
    meas_tpot = np.array([d.tpot_s for d in rows])
    best = None
    for j, ms in enumerate(GRID_MS):
        pp = np.array([preds[d.id][j, 1] for d in rows])
        e = np.sum(loss(pp / meas_tpot))
        delays = {}
        for front in sorted({d.frontend for d in rows}):
            sel = [d for d in rows if d.frontend == front]
            delays[front], e_ttft = best_delay(
                np.array([preds[d.id][j, 0] for d in sel]), np.array([d.ttft_s for d in sel])
            )
            e += e_ttft
        if best is None or e < best[0]:
            best = (e, ms / 1e3, delays, j)
    return best[1], best[2], best[3]


def score(rows, preds, j, delays):
    t = [abs((preds[d.id][j, 0] + delays[d.frontend]) / d.ttft_s - 1) for d in rows]
    p = [abs(preds[d.id][j, 1] / d.tpot_s - 1) for d in rows]
    return len(rows), np.median(t), np.percentile(t, 90), np.median(p), np.percentile(p, 90)


def _ms(delays: dict) -> str:
    bounds = (DELAY_GRID[0], DELAY_GRID[-1])
    return ", ".join(
        f"front end {front} {v * 1e3:.1f} ms{' (the search bound)' if v in bounds else ''}"
        for front, v in delays.items()
    )


def main(path: str) -> None:
    from costmodel.model.presets import load_model

    deployments, _ = read(path)
    # dense models fit; the mixture-of-experts rows are held out of the fit and scored with what it gives
    dense = [d for d in deployments if load_model(d.model_path).moe is None]
    held = [d for d in deployments if load_model(d.model_path).moe is not None and d.prefill is None]
    preds = simulate_grid(dense + held)
    dense = [d for d in dense if d.id in preds]
    held = [d for d in held if d.id in preds]
    by_engine = defaultdict(list)
    for d in dense:
        by_engine[d.backend].append(d)
    shipped = {}
    for engine, rows in sorted(by_engine.items()):
        it, delays, j = fit(rows, preds)
        shipped[engine] = {"iteration_s": it, "request_s": delays}
        n, t50, t90, p50, p90 = score(rows, preds, j, delays)
        print(
            f"{engine:7s} all dense rows: iteration {it * 1e3:.1f} ms{' (grid bound)' if j in (0, len(GRID_MS) - 1) else ''}, "
            f"{_ms(delays)}; n {n}: TTFT {t50:.1%} (p90 {t90:.1%}), TPOT {p50:.1%} (p90 {p90:.1%})"
        )
        for front in delays:
            moe = [d for d in held if d.backend == engine and d.frontend == front]
            if moe:
                n, t50, t90, p50, p90 = score(moe, preds, j, delays)
                print(
                    f"        held out: its mixture-of-experts rows behind {front} (n {n}): TTFT {t50:.1%} "
                    f"(p90 {t90:.1%}), TPOT {p50:.1%} (p90 {p90:.1%})"
                )
        for train, test in (("Qwen", "Llama"), ("Llama", "Qwen")):
            a = [d for d in rows if train.lower() in d.model_path.lower()]
            b = [d for d in rows if test.lower() in d.model_path.lower()]
            if not a or not b or {d.frontend for d in b} - {d.frontend for d in a}:
                continue  # a split whose scored rows passed a front end its fit never saw scores nothing
            it2, delays2, j2 = fit(a, preds)
            n, t50, t90, p50, p90 = score(b, preds, j2, delays2)
            print(
                f"        fitted on {train} ({len(a)} rows: {it2 * 1e3:.1f} ms, {_ms(delays2)}), scored on "
                f"{test} (n {n}): TTFT {t50:.1%} (p90 {t90:.1%}), TPOT {p50:.1%} (p90 {p90:.1%})"
            )
    print(json.dumps(shipped, indent=1))
    if "--write" in sys.argv:  # the shipped values: costmodel/engine/overheads.yaml
        from overheads_file import write

        write(
            {e: {"iteration_s": v["iteration_s"], "request_s": v["request_s"]["dynamo"]} for e, v in shipped.items()},
            {e: v["request_s"]["engine"] for e, v in shipped.items() if "engine" in v["request_s"]},
        )


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(args[0] if args else "../shared/measurements/serving/silicon_sample_h100_sxm.csv")
