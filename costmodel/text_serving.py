"""Tables of served models under load (:class:`costmodel.served.LoadPrediction`)."""

from __future__ import annotations

from costmodel.text import aligned, si


def _ms(x: float) -> str:
    return si(x, "s")


def load_records(p) -> list[dict]:
    return [{"device": p.hardware.id, "devices": p.tp, "model": p.model, "engine": p.engine.name,
             "concurrency": p.concurrency, "request_rate": p.request_rate, "input_len": p.input_len,
             "output_len": p.output_len, "ttft_s": p.ttft_s, "ttft_p90_s": p.ttft.p90, "tpot_s": p.tpot_s,
             "tpot_p90_s": p.tpot.p90, "itl_p99_s": p.itl.p99, "e2e_s": p.e2e_s, "requests_per_s": p.requests_per_s,
             "output_tokens_per_s": p.output_tokens_per_s,
             "output_tokens_per_s_per_device": p.output_tokens_per_s_per_device,
             "output_tokens_per_s_per_user": p.output_tokens_per_s_per_user, "mean_batch": p.mean_batch,
             "kv_use_max": p.kv_use_max, "preemptions": p.preemptions, "evaluator": p.evaluator}]


def load_table(results: list) -> str:
    """One line per prediction, then the first one's latency percentiles, time split and assumptions."""
    head = ["device", "engine", "load", "TTFT", "TTFT p90", "TPOT", "TPOT p90", "ITL p99", "e2e", "req/s",
            "tok/s/device", "tok/s/user", "batch", "KV use"]
    rows = [tuple(head)]
    for p in results:
        load = f"c={p.concurrency}" if p.concurrency is not None else f"{p.request_rate:g} req/s"
        rows.append((f"{p.tp} x {p.hardware.id}" if p.tp > 1 else p.hardware.id, p.engine.name, load, _ms(p.ttft_s),
                     _ms(p.ttft.p90), _ms(p.tpot_s), _ms(p.tpot.p90), _ms(p.itl.p99), _ms(p.e2e_s),
                     f"{p.requests_per_s:.3g}", f"{p.output_tokens_per_s_per_device:,.0f}",
                     f"{p.output_tokens_per_s_per_user:.1f}", f"{p.mean_batch:.1f}", f"{p.kv_use_max:.0%}"))
    p = results[0]
    title = (f"{p.model_name} [{p.model}] served by {p.engine.name} {p.engine.version}: {p.num_requests} requests of "
             f"{p.input_len:g} + {p.output_len:g} tokens ({p.evaluator})")
    s = p.time_split
    busy = s.prefill_s + s.decode_s + s.comm_s + s.overhead_s
    lines = [title, "", *aligned(rows, right=set(range(3, 14))), ""]
    if busy > 0:
        lines.append(f"engine time: prefill {s.prefill_s / busy:.0%}, decode {s.decode_s / busy:.0%}, "
                     f"communication {s.comm_s / busy:.0%}, fixed costs {s.overhead_s / busy:.0%}; "
                     f"{p.prefill_iteration_share:.0%} of {p.iterations} iterations carried prefill; "
                     f"{p.preemptions} preemptions")
    lines += ["", "Assumptions:", *[f"  - {a}" for a in p.assumptions]]
    return "\n".join(lines)


def load_capacity_table(report) -> str:
    """One line per device and layout: the most clients, what binds, latency and throughput there."""
    targets = ", ".join(t for t in (
        f"TPOT <= {_ms(report.tpot_target_s)}" if report.tpot_target_s is not None else "",
        f"TTFT <= {_ms(report.ttft_target_s)}" if report.ttft_target_s is not None else "") if t)
    lines = [f"served by {report.engine}: requests of {report.input_len} + {report.output_len} tokens, "
             f"{report.statistic} {targets}", ""]
    rows = [("device", "model", "attention", "clients", "binds", "TTFT", "TPOT", "batch", "tok/s/device",
             "tok/s/user") + (("$/M tokens",) if report.price_per_hour is not None else ())]
    for pt in report.points:
        p = pt.at
        stat = (lambda s: s.p90) if report.statistic == "p90" else (lambda s: s.mean)
        cells = (pt.device, pt.model, pt.attention, str(pt.concurrency), pt.binds or "-",
                 _ms(stat(p.ttft)) if p else "-", _ms(stat(p.tpot)) if p else "-",
                 f"{p.mean_batch:.1f}" if p else "-", f"{p.output_tokens_per_s_per_device:,.0f}" if p else "-",
                 f"{p.output_tokens_per_s_per_user:.1f}" if p else "-")
        if report.price_per_hour is not None:
            cells += (f"{pt.cost_per_million_tokens:.3g}" if pt.cost_per_million_tokens is not None else "-",)
        rows.append(cells)
    lines += aligned(rows, right=set(range(3, len(rows[0]))) - {4})
    lines += ["", "Assumptions:", *[f"  - {a}" for a in report.assumptions]]
    return "\n".join(lines)


def disagg_table(p) -> str:
    """A disaggregated deployment: its pools, the client's latencies and where TTFT went."""
    load = f"c={p.concurrency}" if p.concurrency is not None else f"{p.request_rate:g} req/s"
    title = (f"{p.model_name} [{p.model}] served disaggregated by {p.engine} {p.engine_version}: {p.num_requests} "
             f"requests of {p.input_len:g} + {p.output_len:g} tokens, {load}, {p.devices} devices")
    rows = [("pool", "workers", "devices each", "batch limit", "token budget", "KV tokens", "mean batch", "busy")]
    for s in (p.prefill, p.decode):
        rows.append((s.role, str(s.workers), f"{s.tp} x {s.hardware.id}", str(s.max_num_seqs),
                     str(s.max_num_batched_tokens), f"{s.kv_cache_tokens:,}", f"{s.mean_batch:.1f}",
                     f"{s.busy_share:.0%}"))
    lat = [("TTFT", "TTFT p90", "TPOT", "TPOT p90", "e2e", "req/s", "tok/s/device", "tok/s/user"),
           (_ms(p.ttft_s), _ms(p.ttft.p90), _ms(p.tpot_s), _ms(p.tpot.p90), _ms(p.e2e_s), f"{p.requests_per_s:.3g}",
            f"{p.output_tokens_per_s_per_device:,.0f}", f"{p.output_tokens_per_s_per_user:.1f}")]
    s = p.ttft_split
    lines = [title, "", *aligned(rows, right=set(range(1, 8))), "", *aligned(lat, right=set(range(8))), "",
             f"TTFT = queueing {_ms(s.queue_s)} + prefill {_ms(s.prefill_s)} + KV transfer {_ms(s.transfer_s)} + "
             f"front end {_ms(s.front_end_s)}; {p.decode_waits} requests waited for a decode slot or pages",
             "", "Assumptions:", *[f"  - {a}" for a in p.assumptions]]
    return "\n".join(lines)
