"""Measured deployments against predictions: every row of a file in the layout of NVIDIA aiconfigurator's silicon
sample (``silicon_sample.csv``: one served model at a fixed concurrency, with mean TTFT and TPOT measured by
the benchmark client) that costmodel can express is predicted with :func:`costmodel.engine.served.serve` (or
:func:`costmodel.deploy.disagg.serve_disaggregated`); every other row is counted under the reason it cannot be.

A row's prediction is the closed loop of ``silicon_concurrency`` clients (the ``batch_size`` times the attention
data parallel groups where the source names none; a whole multiple of that is as many replicas behind a router,
each with an even share of the clients) on ``tp_size`` devices of the row's system under its engine (``backend``), with max_num_seqs set to
``batch_size``, its pipeline stages, attention data parallel groups and expert-parallel layout (over the
tensor-parallel group, over every group's devices, or in groups that shard their experts), the token budget per
iteration that the row's launcher gives the engine (:func:`costmodel.validation.launchers.dynamo_budget` for engines that aiconfigurator's
generator starts under Dynamo, the engine's own default otherwise), the weights and GEMMs in the row's precision,
and the KV cache in the engine's default for the checkpoint. A disaggregated row is its two pools, each of its
workers, size and batch. A row of InferenceX's runs (:func:`costmodel.validation.launchers.inferencex_run`) is its recipe's engine settings
(:data:`costmodel.validation.launchers.INFERENCEX_RECIPES`) behind the engine's own server, its lengths drawn as its client draws them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from costmodel.core.errors import CostModelError
from costmodel.validation.deployments import Deployment, read
from costmodel.validation.launchers import (
    profile_of,
)

#: How a row's benchmark is run: aiconfigurator's benchmark template (generator/config/backend_templates/
#: benchmark/bench_run.sh.j2) runs aiperf with 2 warm-up requests and 50 measured ones per client.
AIPERF_ROUNDS = {"warmup": 2, "measured": 50}


def predict(d: Deployment, overheads: dict | None = None, evaluator: str = "simulation", protocol: str = "plain"):
    from costmodel.engine.config import EngineFlags
    from costmodel.engine.load import Load
    from costmodel.engine.served import serve
    from costmodel.hardware.catalog import load_profile
    from costmodel.model.presets import load_model

    rounds = (
        {
            "warmup_requests": AIPERF_ROUNDS["warmup"] * d.concurrency,
            "num_requests": AIPERF_ROUNDS["measured"] * d.concurrency,
        }
        if protocol == "aiperf"
        else {}
    )
    drawn = dict(input_dist="range", output_dist="range", spread=d.spread) if d.spread else {}
    load = Load(d.isl, d.osl, concurrency=d.concurrency, **drawn, **rounds)
    common = dict(
        engine_name=d.backend,
        weight_dtype=d.weight_dtype,
        kv_dtype=d.kv_dtype,
        overheads=overheads,
        evaluator=evaluator,
        frontend=d.frontend,
    )
    m, hw = load_model(d.model_name), load_profile(profile_of(d.system))
    if d.prefill is not None:
        from costmodel.deploy.disagg import serve_disaggregated

        flags = EngineFlags(mxfp4_activations=d.mxfp4_activations)
        return serve_disaggregated(m, hw, load, prefill=d.prefill.pool(), decode=d.decode.pool(), flags=flags, **common)
    flags = EngineFlags(
        max_num_seqs=d.layout.batch,
        mxfp4_activations=d.mxfp4_activations,
        max_num_batched_tokens=d.max_num_batched_tokens,
        memory_fraction=d.memory_fraction,
        async_scheduling=d.async_scheduling,
        prefix_caching=d.prefix_caching,
    )
    return serve(m, hw, load, layout=d.layout.layout(), flags=flags, **common)


def decoding_requests(clients: int, ttft_s: float, tpot_s: float, output_len: int) -> float:
    """Requests decoding at once, on average, in a closed loop of ``clients`` whose requests wait ``ttft_s`` for
    their first token and ``tpot_s`` for each after it, from those means alone (Little's law: the loop completes
    clients / (TTFT + decode time) requests a second, each decoding for (output_len - 1) x TPOT). A deployment whose
    engine ran its clients' requests all at once gives about its clients (less their share of time before the first
    token); one that held requests back, in the engine's queue or before it, gives fewer."""
    decode = (output_len - 1) * tpot_s
    return clients * decode / (ttft_s + decode)


def summary(rows: list[dict]) -> list[dict]:
    """Per system x engine x model x mode, per mode and over all rows: n, median and p90 |error| of TTFT and
    TPOT, median measured/predicted."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["system"], r["backend"], r["model_path"], r["mode"])].append(r)
    modes = sorted({r["mode"] for r in rows})
    if len(modes) > 1:
        for mode in modes:
            groups[("all", "all", "all", mode)] = [r for r in rows if r["mode"] == mode]
    groups[("all", "all", "all", "all")] = rows
    out = []
    for (system, backend, model, mode), rs in groups.items():
        if not rs:
            continue
        ttft = np.array([abs(r["predicted_ttft_s"] / r["measured_ttft_s"] - 1) for r in rs])
        tpot = np.array([abs(r["predicted_tpot_s"] / r["measured_tpot_s"] - 1) for r in rs])
        out.append(
            {
                "system": system,
                "backend": backend,
                "model_path": model,
                "mode": mode,
                "n": len(rs),
                "ttft_median_error": float(np.median(ttft)),
                "ttft_p90_error": float(np.percentile(ttft, 90)),
                "tpot_median_error": float(np.median(tpot)),
                "tpot_p90_error": float(np.percentile(tpot, 90)),
                "ttft_measured_over_predicted": float(
                    np.median([r["measured_ttft_s"] / r["predicted_ttft_s"] for r in rs])
                ),
                "tpot_measured_over_predicted": float(
                    np.median([r["measured_tpot_s"] / r["predicted_tpot_s"] for r in rs])
                ),
            }
        )
    return out


def _price(d: Deployment, overheads: dict | None) -> tuple[dict | None, dict | None]:
    """(the row, None) of one deployment priced, or (None, why it was skipped)."""
    from costmodel.engine.served import NoRoomForOneRequest

    try:
        p = predict(d, overheads)
    except NoRoomForOneRequest as err:  # counted apart: the weights leave no cache for one request
        return None, {"id": d.id, "reason": f"too big for its devices: {err}"}
    except CostModelError as err:
        return None, {"id": d.id, "reason": f"cannot be priced: {err}"}
    row = {
        "id": d.id,
        "system": d.system,
        "backend": d.backend,
        "model_path": d.model_path,
        "mode": d.mode,
        "measured_ttft_s": d.ttft_s,
        "predicted_ttft_s": p.ttft_s,
        "measured_tpot_s": d.tpot_s,
        "predicted_tpot_s": p.tpot_s,
        "command": d.command(),
    }
    return row | ({"assumed": list(d.assumed)} if d.assumed else {}), None


def _price_chunk(args) -> list:
    chunk, overheads = args
    return [_price(d, overheads) for d in chunk]


def validate_serving(path: str | Path, *, overheads: dict | None = None, workers: int | None = None) -> dict:
    """``{"rows", "skipped", "summary"}`` for a deployments file, priced over ``workers`` processes (every core
    by default; 1: in this process), in the file's order, with a progress bar on a terminal."""
    from costmodel.core.parallel import run_all, workers_for
    from costmodel.core.progress import bar

    deployments, skipped = read(path)
    # the costliest first (a simulation's work grows with its clients' output tokens), in small chunks, so that no
    # process is left with the slowest rows at the end; the results back in the file's order
    order = sorted(range(len(deployments)), key=lambda i: -(deployments[i].concurrency or 1) * deployments[i].osl)
    chunks = [order[i : i + 4] for i in range(0, len(order), 4)]
    with bar(len(deployments), "deployments") as advance:
        got = run_all(
            _price_chunk,
            [([deployments[i] for i in c], overheads) for c in chunks],
            workers_for(len(deployments), 20, workers),
            lambda results: advance(len(results)),
        )
    priced: list = [None] * len(deployments)
    for chunk, results in zip(chunks, got):
        for i, one in zip(chunk, results):
            priced[i] = one
    rows = [row for row, _ in priced if row is not None]
    skipped += [why for _, why in priced if why is not None]
    return {
        "rows": rows,
        "skipped": skipped,
        "summary": summary(rows),
        "reasons": dict(Counter(s["reason"].split(":")[0] for s in skipped)),
    }


def summary_table(report: dict) -> str:
    from costmodel.render.text import aligned

    rows = [
        (
            "system",
            "engine",
            "model",
            "mode",
            "n",
            "TTFT |err| median",
            "p90",
            "measured/predicted",
            "TPOT |err| median",
            "p90",
            "measured/predicted",
        )
    ]
    for s in sorted(
        report["summary"],
        key=lambda s: (s["system"] == "all", s["mode"] == "all", s["system"], s["backend"], s["model_path"], s["mode"]),
    ):
        rows.append(
            (
                s["system"],
                s["backend"],
                s["model_path"],
                s["mode"],
                str(s["n"]),
                f"{s['ttft_median_error']:.1%}",
                f"{s['ttft_p90_error']:.1%}",
                f"{s['ttft_measured_over_predicted']:.2f}",
                f"{s['tpot_median_error']:.1%}",
                f"{s['tpot_p90_error']:.1%}",
                f"{s['tpot_measured_over_predicted']:.2f}",
            )
        )
    totals = sum(s["system"] == "all" for s in report["summary"])
    lines = aligned(rows, right=set(range(4, 11)), rules=(1, len(rows) - totals))
    total = len(report["rows"]) + len(report["skipped"])
    lines += ["", f"{len(report['rows'])} of {total} deployments predicted; not expressible:"]
    lines += [f"  {n:4d}  {reason}" for reason, n in sorted(report["reasons"].items(), key=lambda kv: -kv[1])]
    assumed = Counter(a for r in report["rows"] for a in r.get("assumed", ()))
    if assumed:
        lines += ['predicted with what the row does not record (each row\'s "assumed" in the JSON):']
        lines += [f"  {n:4d}  {a}" for a, n in sorted(assumed.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


def serving_command(path: str, json_path: str | None, plot_path: str | None, fmt: str = "table"):
    """``costmodel validate --serving FILE``: the summary; ``--json`` the rows, skipped rows and summary;
    ``--plot`` predicted against measured TTFT and TPOT (log-log)."""
    import json

    from costmodel.core.files import write_text, wrote
    from costmodel.validation import check_outputs

    check_outputs(json_path, plot_path)
    report = validate_serving(path)
    quiet = json_path == "-"
    if not quiet:
        if fmt in ("csv", "markdown"):
            from costmodel.render.records import records_csv, records_markdown

            yield (records_csv if fmt == "csv" else records_markdown)(report["summary"]).rstrip("\n")
        else:
            yield summary_table(report)
    if json_path is not None:
        write_text(json_path, json.dumps({k: report[k] for k in ("rows", "skipped", "summary")}))
        if not quiet:
            yield from wrote(json_path)
    if plot_path is not None:
        from costmodel.render.plots import save
        from costmodel.render.serving_plots import draw_predicted_vs_measured

        rows = [
            {
                "measured_s": r[f"measured_{k}_s"],
                "predicted_s": r[f"predicted_{k}_s"],
                "group": f"{k.upper()} {r['backend']}",
            }
            for r in report["rows"]
            for k in ("ttft", "tpot")
        ]
        save(draw_predicted_vs_measured(rows, "served deployments: predicted against measured"), plot_path)
        if not quiet:
            yield from wrote(plot_path)
