"""Tables of served models under load (:class:`costmodel.engine.served.LoadPrediction`)."""

from __future__ import annotations

from costmodel.render.text import aligned, count, si, si_range


def ms(x: float) -> str:
    return si(x, "s")


def tokens(x: float) -> str:
    """A token count (a mean may be fractional) with thousands separators, never in exponent notation."""
    return count(x) if float(x).is_integer() else f"{x:,.1f}"


def load_records(p) -> list[dict]:
    return [
        {
            "device": p.hardware.id,
            "devices": p.tp,
            "model": p.model,
            "engine": p.engine.name,
            "engine_version": p.engine.version,
            "weight_dtype": p.weight_dtype,
            "kv_dtype": p.kv_dtype,
            "concurrency": p.concurrency,
            "request_rate": p.request_rate,
            "input_len": p.input_len,
            "output_len": p.output_len,
            "ttft_s": p.ttft_s,
            "ttft_p90_s": p.ttft.p90,
            "tpot_s": p.tpot_s,
            "tpot_p90_s": p.tpot.p90,
            "itl_p99_s": p.itl.p99,
            "e2e_s": p.e2e_s,
            "requests_per_s": p.requests_per_s,
            "output_tokens_per_s": p.output_tokens_per_s,
            "output_tokens_per_s_per_device": p.output_tokens_per_s_per_device,
            "output_tokens_per_s_per_user": p.output_tokens_per_s_per_user,
            "mean_batch": p.mean_batch,
            "kv_use_max": p.kv_use_max,
            "preemptions": p.preemptions,
            "saturation_requests_per_s": p.saturation_requests_per_s,
            "overloaded": p.overloaded,
            "evaluator": p.evaluator,
        }
    ]


def _band_line(p, label: str) -> str:
    """Where a measured mean is expected to fall; ``label``: the percentiles the served ranges span
    (:func:`costmodel.price.bands.served_label`)."""
    return (
        f"{label} of a measured mean (over the {p.ttft_band.basis}): TTFT "
        f"{si_range(p.ttft_band.low_s, p.ttft_band.high_s, 's')}, TPOT "
        f"{si_range(p.tpot_band.low_s, p.tpot_band.high_s, 's')}"
        + ("; measured on deployments that kept up with their load, not on an overloaded one" if p.overloaded else "")
    )


def _load_row(p, precisions: bool) -> tuple:
    """One served prediction's line: devices, engine (and its dtypes where configurations compare them), load,
    latencies, throughput, batch and KV use."""
    load = f"c={p.concurrency}" if p.concurrency is not None else f"{p.request_rate:g} req/s"
    devices = f"{p.tp} x {p.hardware.id}" if p.tp > 1 else p.hardware.id
    if p.pipeline_parallel > 1:
        devices = f"{p.pipeline_parallel} x {devices} (pipeline)"
    if p.attention_dp > 1:
        devices = f"{p.attention_dp} x {devices} (attention DP)"
    if p.replicas > 1:
        devices = f"{p.replicas} x {devices} (replicas)"
    engine = p.engine.name + (f" {p.weight_dtype}/{p.kv_dtype}" if precisions else "")
    return (
        devices,
        engine,
        load,
        ms(p.ttft_s),
        ms(p.ttft.p90),
        ms(p.tpot_s),
        ms(p.tpot.p90),
        ms(p.itl.p99),
        ms(p.e2e_s),
        f"{p.requests_per_s:.3g}",
        f"{p.output_tokens_per_s_per_device:,.0f}",
        f"{p.output_tokens_per_s_per_user:.1f}",
        f"{p.mean_batch:.1f}",
        f"{p.kv_use_max:.0%}",
    )


def load_table(results: list, band_label: str) -> str:
    """One line per prediction (a load curve's: one per load), then the first one's latency percentiles, time split and assumptions;
    ``band_label``: the percentiles its served ranges span."""
    head = [
        "device",
        "engine",
        "load",
        "TTFT",
        "TTFT p90",
        "TPOT",
        "TPOT p90",
        "ITL p99",
        "e2e",
        "req/s",
        "tok/s/device",
        "tok/s/user",
        "batch",
        "KV use",
    ]
    precisions = len({(r.weight_dtype, r.kv_dtype) for r in results}) > 1  # compared: each row says its own
    if precisions:
        head[1] = "engine weights/KV"
    rows = [tuple(head)]
    rows += [_load_row(p, precisions) for p in results]
    p = results[0]
    counts = sorted({r.num_requests for r in results})
    many = f"{p.num_requests} requests" if len(counts) == 1 else f"{counts[0]:,}-{counts[-1]:,} requests a load"
    engines = ", ".join(dict.fromkeys(f"{r.engine.name} {r.engine.version}" for r in results))
    title = (
        f"{p.model_name} [{p.model}] served by {engines}: {many} of "
        f"{tokens(p.input_len)} + {tokens(p.output_len)} tokens ({p.evaluator})"
    )
    s = p.time_split
    busy = s.prefill_s + s.decode_s + s.comm_s + s.overhead_s
    lines = [title, "", *aligned(rows, right=set(range(3, 14))), ""]
    if p.ttft_band is not None:
        lines.append(_band_line(p, band_label))
    if p.goodput_requests_per_s is not None:
        said = ", ".join(f"{k.upper()} <= {v * 1e3:g} ms" for k, v in p.goodput_objectives.items())
        lines.append(f"goodput: {p.goodput_requests_per_s:.3g} requests/s meet {said} (of {p.requests_per_s:.3g})")
    if p.percentiles is not None:
        for metric, values in p.percentiles.items():
            lines.append(f"{metric.upper()} " + ", ".join(f"{k} {si(v, 's')}" for k, v in values.items()))
    if p.overloaded:
        lines.append(overload_line(p))
    if busy > 0:
        lines.append(
            f"engine time: prefill {s.prefill_s / busy:.0%}, decode {s.decode_s / busy:.0%}, "
            f"communication {s.comm_s / busy:.0%}, fixed costs {s.overhead_s / busy:.0%}; "
            f"{p.prefill_iteration_share:.0%} of {p.iterations:,} iterations carried prefill; "
            f"{p.preemptions:,} preemptions"
        )
    lines += energy_lines(p)
    lines += [line for q in results for line in _mean_above_p90(q, len(results) > 1)]
    lines += ["", "Columns:", *LOAD_LEGEND, "", "Assumptions:", *[f"  - {a}" for a in p.assumptions]]
    return "\n".join(lines)


def energy_lines(p) -> list[str]:
    """A served prediction's power, energy per output token and, with a price, dollars per million tokens."""
    e = p.energy
    if e is None or p.energy_j_per_output_token is None:
        return []
    phases = ", ".join(f"{k} {v:.0f} W" for k, v in e.phase_power_w.items())
    shares = ", ".join(f"{k} {v:.0%}" for k, v in e.share.items())
    return _energy_and_cost(
        p,
        f"range {e.power_w_range[0]:.0f}-{e.power_w_range[1]:.0f}; while running {phases}; board limit {e.limit_w:g} W",
        f"by phase: {shares}",
    )


def disagg_energy_lines(p) -> list[str]:
    """A disaggregated deployment's power (each pool's, the KV transfer's), energy per output token and cost."""
    if p.energy_j_per_output_token is None:
        return []
    pools = ", ".join(f"{s.role} workers {s.energy.power_w:.0f} W each" for s in (p.prefill, p.decode))
    return _energy_and_cost(p, f"{pools}; the KV transfer {p.kv_transfer_w:.2g} W in all", "")


def _energy_and_cost(p, power: str, tail: str) -> list[str]:
    lo, hi = p.energy_j_per_output_token_range
    out = [
        f"energy: {p.power_w:.0f} W per device ({power}), {si(p.energy_j_per_output_token, 'J')} per output token "
        f"(range {si(lo, 'J')}-{si(hi, 'J')}), {p.output_tokens_per_j:,.2f} output tokens per J, "
        f"{si(p.energy_j_per_request, 'J')} per request" + (f"; {tail}" if tail else "")
    ]
    if p.usd_per_million_output_tokens is not None:
        out.append(
            f"cost: ${p.usd_per_million_output_tokens:,.3f} per million output tokens, "
            f"${p.usd_per_million_tokens:,.3f} per million tokens (prompt and output) at ${p.price_per_gpu_hour:,.2f} "
            "per GPU-hour"
        )
    return out


#: What a served table's columns mean.
LOAD_LEGEND = [
    "  - load: c=N clients, each sending its next request when its last one ends (closed loop), or requests a "
    "second (open loop); TTFT: time to the first token, mean over requests; TPOT: time per output token after the "
    "first, (end - first token) / (output - 1), mean; p90, ITL p99: percentiles over requests and over gaps "
    "between tokens; e2e: a request's whole time, mean",
    "  - req/s, tok/s/device: requests and output tokens completed a second (the second per device); "
    "tok/s/user: a request's output tokens over its whole time (output / e2e), mean; batch: sequences in an "
    "iteration, mean; KV use: the KV cache's fullest share",
]


def _mean_above_p90(p, named: bool) -> list[str]:
    """A line where a mean lies above its own p90: the first wave's requests, which all arrive at once, wait far
    longer than the rest and pull the mean past nine in ten of the requests."""
    out = []
    for name, mean, p90 in (("TTFT", p.ttft_s, p.ttft.p90), ("TPOT", p.tpot_s, p.tpot.p90)):
        if mean > p90:
            who = f" ({p.hardware.id}, {p.engine.name})" if named else ""
            out.append(
                f"{name}'s mean{who} lies above its p90: the first wave's requests, sent together when the "
                "run starts, wait far longer than the rest, and those few long waits pull the mean past "
                "nine requests in ten"
            )
    return out


def overload_line(p) -> str:
    """What an open loop whose arrivals outpace the engine reports: the most it completes and why the TTFT is the
    run's, not a steady state's."""
    times = "the TTFT and end-to-end times"
    if p.saturation_binds in ("prefill pool", "decode pool"):  # disaggregated: one pool busy all the time
        how = f"with its {p.saturation_binds} busy all the time"
        if p.saturation_binds == "decode pool":
            times = "the waits for a decode slot, after the first token (in TPOT and end-to-end),"
    else:
        held = {
            "sequence limit": "its sequence limit",
            "kv cache": "its KV cache",
            "client connections": "the client's connections",
        }.get(p.saturation_binds, p.saturation_binds)
        each = " per engine" if p.attention_dp * p.replicas > 1 else ""
        how = f"with the most sequences running ({p.saturation_sequences}{each}, as many as {held} holds)"
    return (
        f"overloaded: requests arrive at {p.request_rate:g}/s, more than the {p.saturation_requests_per_s:.3g}/s "
        f"the deployment completes {how}: its queue grows for as long as requests arrive, so {times} are "
        f"those of these {p.num_requests} requests and grow with their number; below "
        f"{p.saturation_requests_per_s:.3g} requests/s it settles"
    )


def load_capacity_table(report) -> str:
    """One line per device and layout: the most clients, what binds, latency and throughput there."""
    targets = ", ".join(
        t
        for t in (
            f"TPOT <= {ms(report.tpot_target_s)}" if report.tpot_target_s is not None else "",
            f"TTFT <= {ms(report.ttft_target_s)}" if report.ttft_target_s is not None else "",
        )
        if t
    )
    lines = [
        f"served by {report.engine}: requests of {report.input_len:,} + {report.output_len:,} tokens, "
        f"{report.statistic} {targets}",
        *([report.stopped[:1].upper() + report.stopped[1:]] if report.stopped else []),
        "",
    ]
    rate = report.load == "request-rate"
    joules = any(pt.at is not None and pt.at.energy_j_per_output_token is not None for pt in report.points)
    rows = [
        (
            "device",
            "model",
            "attention",
            "req/s" if rate else "clients",
            "binds",
            "TTFT",
            "TPOT",
            "batch",
            "tok/s/device",
            "tok/s/user",
        )
        + (("J/token",) if joules else ())
        + (("$/M tokens",) if report.price_per_hour is not None else ())
    ]
    for pt in report.points:
        p = pt.at
        stat = (lambda s: s.p90) if report.statistic == "p90" else (lambda s: s.mean)
        cells = (
            pt.device,
            pt.model,
            pt.attention,
            f"{pt.request_rate:.3g}" if rate else str(pt.concurrency),
            pt.binds or "-",
            ms(stat(p.ttft)) if p else "-",
            ms(stat(p.tpot)) if p else "-",
            f"{p.mean_batch:.1f}" if p else "-",
            f"{p.output_tokens_per_s_per_device:,.0f}" if p else "-",
            f"{p.output_tokens_per_s_per_user:.1f}" if p else "-",
        )
        if joules:
            cells += (si(p.energy_j_per_output_token, "J") if p and p.energy_j_per_output_token else "-",)
        if report.price_per_hour is not None:
            cells += (f"{pt.cost_per_million_tokens:.3g}" if pt.cost_per_million_tokens is not None else "-",)
        rows.append(cells)
    lines += aligned(rows, right=set(range(3, len(rows[0]))) - {4})
    lines += [
        "",
        "Columns:",
        f"  - {'req/s: the highest request rate' if rate else 'clients: the most clients'} "
        f"under the targets ({report.statistic}s); binds: what stops more; TTFT, TPOT: their "
        f"{report.statistic}s there; batch: sequences in an iteration, mean; tok/s/device: output tokens a "
        "second per device; tok/s/user: a request's output tokens over its whole time"
        + ("; J/token: every device's energy over the output tokens there (docs/energy.md)" if joules else ""),
        "",
        "Assumptions:",
        *[f"  - {a}" for a in report.assumptions],
    ]
    return "\n".join(lines)


def worker_devices(s) -> str:
    """One worker of a disaggregated pool's summary: its devices, and its attention data parallel groups."""
    devices = f"{s.tp} x {s.hardware.id}"
    return f"{s.attention_dp} x {devices} (attention DP)" if s.attention_dp > 1 else devices


def disagg_table(p, band_label: str) -> str:
    """A disaggregated deployment: its pools, the client's latencies and where TTFT went; ``band_label``: the
    percentiles its served ranges span."""
    load = f"c={p.concurrency}" if p.concurrency is not None else f"{p.request_rate:g} req/s"
    title = (
        f"{p.model_name} [{p.model}] served disaggregated by {p.engine} {p.engine_version}: {p.num_requests} "
        f"requests of {tokens(p.input_len)} + {tokens(p.output_len)} tokens, {load}, {p.devices} devices"
    )
    rows = [("pool", "workers", "devices each", "batch limit", "token budget", "KV tokens", "mean batch", "busy")]
    for s in (p.prefill, p.decode):
        rows.append(
            (
                s.role,
                str(s.workers),
                worker_devices(s),
                str(s.max_num_seqs),
                str(s.max_num_batched_tokens),
                f"{s.kv_cache_tokens:,}",
                f"{s.mean_batch:.1f}",
                f"{s.busy_share:.0%}",
            )
        )
    lat = [
        ("TTFT", "TTFT p90", "TPOT", "TPOT p90", "e2e", "req/s", "tok/s/device", "tok/s/user"),
        (
            ms(p.ttft_s),
            ms(p.ttft.p90),
            ms(p.tpot_s),
            ms(p.tpot.p90),
            ms(p.e2e_s),
            f"{p.requests_per_s:.3g}",
            f"{p.output_tokens_per_s_per_device:,.0f}",
            f"{p.output_tokens_per_s_per_user:.1f}",
        ),
    ]
    s = p.ttft_split
    lines = [
        title,
        "",
        *aligned(rows, right=set(range(1, 8))),
        "",
        *aligned(lat, right=set(range(8))),
        "",
        f"TTFT = queueing {ms(s.queue_s)} + prefill {ms(s.prefill_s)} + KV transfer {ms(s.transfer_s)} + "
        f"front end {ms(s.front_end_s)}"
        + (f"; {p.decode_waits} requests waited for a decode slot or pages" if p.decode_waits is not None else ""),
        *([_band_line(p, band_label)] if p.ttft_band is not None else []),
        *([overload_line(p)] if p.overloaded else []),
        *disagg_energy_lines(p),
        "",
        "Columns:",
        *DISAGG_LEGEND,
        "",
        "Assumptions:",
        *[f"  - {a}" for a in p.assumptions],
    ]
    return "\n".join(lines)


#: What a disaggregated deployment's tables mean.
DISAGG_LEGEND = [
    "  - pool: prefill or decode workers; devices each: one worker's devices and layout; batch limit, token budget: "
    "the engine's sequence limit and tokens an iteration; KV tokens: one worker's cache; mean batch: sequences in "
    "an iteration, mean; busy: the share of the run a worker spent in iterations",
    "  - TTFT, TPOT, e2e: means over requests (p90: the 90th percentile); req/s, tok/s/device: completed a second "
    "(output tokens per device of both pools); tok/s/user: a request's output tokens over its whole time",
]
