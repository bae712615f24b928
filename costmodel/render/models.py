"""Text renderings of the whole-model reports (a model step, requests, capacity, devices side by side, model
sweeps) and of the hardware and model lists; they format typed reports and import no producer."""

from __future__ import annotations

from costmodel.render.text import aligned, band_cell, capacity_text, count, si


def model_table(p) -> str:
    """A model's decode step op by op, then TPOT, TTFT and memory."""
    m, w, mem, hw = p.model, p.workload, p.memory, p.hardware
    devices, attention, extras, dtypes = _model_header(p)
    published = f" (published {_params(m.published_params)})" if m.published_params else ""
    active = f", {_params(m.active_params)} active per token" if m.active_params != m.params else ""
    lines = [
        f"{hw.name} [{hw.id}], {dtypes}, {devices}",
        f"{m.name} [{m.id}]: {_params(m.params)} parameters{published}{active}; {m.layers} layers, {attention}"
        + "".join(f"; {e}" for e in extras),
        f"workload: batch {w.batch:,}, context {w.context:,}"
        + (f", source {w.source:,}" if w.source else "")
        + f", {w.execution} attention",
        "",
        "decode step (one token per sequence), per device:",
    ]
    rows = _decode_rows(p)
    lines += aligned(rows, right={2, 3, 4, 5, 6}, rules=(1, -1))
    t = p.total
    span = lambda b: f" (range {band_cell(b)})" if b is not None else ""  # noqa: E731
    lines += [
        "",
        f"TPOT {si(t.tpot_s, 's')}{span(p.decode.band)}   tokens/s {si(t.tokens_per_s)}   "
        f"TTFT {si(t.ttft_s, 's')}{span(p.prefill.band)} (prefill of a {w.context}-token prompt)",
        f"KV cache {si(mem.kv_cache_bytes_per_token, 'B')} per token, {si(mem.kv_cache_bytes_per_device, 'B')} per "
        f"device; weights {si(mem.weight_bytes_per_device, 'B')} per device; fits in "
        f"{si(mem.capacity_bytes, 'B')}: {'yes' if mem.fits else 'NO'}; largest batch {mem.max_batch:,} "
        f"(context {w.context:,}); largest context "
        + (
            f"{mem.max_context:,} (batch {w.batch:,})"
            if mem.max_context is not None
            else "unlimited (every layer caches at most its window)"
        ),
        *_energy_line(p),
        "",
        "Columns:",
        "  - kernels: how many times the op runs in one step, over every layer; FLOPs, bytes: those "
        "kernels' together; time: as priced (the first assumption); range: where its measured time is expected to "
        "fall; bound: the longer of compute and memory at the device's fitted rates",
        "",
        "Assumptions:",
        *(f"  - {a}" for a in p.assumptions),
    ]
    return "\n".join(lines)


def _energy_line(p) -> list[str]:
    """The step's and the prefill's energy and mean power per device (none where the device states no power)."""
    d, f, w = p.decode, p.prefill, p.workload
    if d.energy_j is None:
        return []
    return [
        f"energy per device: decode step {si(d.energy_j, 'J')} at {d.power_w:.0f} W "
        f"({si(d.energy_j / max(w.batch, 1), 'J')} per token of the batch); prefill {si(f.energy_j, 'J')} at "
        f"{f.power_w:.0f} W (costmodel/hardware/energy.yaml; docs/energy.md)"
    ]


def _model_header(p) -> tuple[str, str, list[str], str]:
    """(the devices, the attention, the experts and windows, the dtypes) of a model's table, in words."""
    m, w, hw = p.model, p.workload, p.hardware
    devices = f"{hw.devices} devices (tensor parallel)" if hw.devices > 1 else "1 device"
    if w.attention_dp > 1:
        devices = (
            f"{hw.devices * w.attention_dp} devices ({w.attention_dp} attention data parallel groups of "
            f"{hw.devices}{', tensor parallel' if hw.devices > 1 else ''})"
        )
    kv_note = f", {m.kv_heads_per_device} per device" if hw.devices > 1 else ""
    if m.mla:
        attention = f"{m.heads} heads, {m.attention}"
    else:
        attention = f"{m.heads} heads, {m.kv_heads} key/value heads{kv_note}, head dim {m.head_dim}"
    extras = []
    if m.moe:
        extras.append(
            f"{m.moe['experts']} experts, {m.moe['experts_per_token']} per token, in {m.moe['layers']} layers"
        )
    if m.sliding_window:
        extras.append(f"{m.local_layers} layers in a {m.sliding_window}-position window")
    dtypes = (
        w.dtype
        if w.weight_dtype == w.dtype == w.kv_dtype
        else (
            f"{w.dtype} activations, "
            + (
                f"{w.weight_dtype} routed experts ({w.dtype} other weights)"
                if w.weight_scope == "experts"
                else f"{w.weight_dtype} weights"
            )
            + f", {w.kv_dtype} KV cache"
        )
    )
    return devices, attention, extras, dtypes


def _decode_rows(p) -> list[tuple]:
    """The decode step's rows: every op, the all-reduces, the total."""
    head = ("section", "op", "kernels", "FLOPs", "bytes", "time", "range", "bound")
    rows = [head] + [
        (o.section, o.name, str(o.count), si(o.flops), si(o.bytes, "B"), si(o.time_s, "s"), band_cell(o.band), o.bound)
        for o in p.decode.ops
    ]
    if p.decode.all_reduce_s:
        rows.append(
            ("tensor parallel", "all-reduce", str(p.decode.all_reduces), "", "", si(p.decode.all_reduce_s, "s"), "", "")
        )
    rows.append(
        (
            "total",
            "",
            "",
            si(p.decode.flops),
            si(p.decode.bytes, "B"),
            si(p.decode.time_s, "s"),
            band_cell(p.decode.band),
            "",
        )
    )
    return rows


def _params(x: float) -> str:
    return f"{x / 1e12:.3g}T" if x >= 1e12 else f"{x / 1e9:.3g}B" if x >= 1e9 else f"{x / 1e6:.3g}M"


def _model_features(m) -> list[str]:
    out = []
    if m.moe:
        e = m.moe
        out.append(f"MoE {e.experts} x {e.experts_per_token}" + (" + shared" if e.shared_d_ff else ""))
    if m.sliding_window:
        out.append(f"window {m.sliding_window} ({m.local_layers}/{m.layers} layers)")
    if m.parallel_block:
        out.append("parallel block")
    if m.quantization:
        out.append(f"{m.quantization.weight_dtype} " + ("experts" if m.quantization.scope == "experts" else "weights"))
    if m.architecture == "encoder-decoder":
        out.append(f"encoder-decoder ({m.encoder_layers} + {m.layers} layers)")
    return out


def models_table(presets, facts: dict[str, dict]) -> str:
    """The model presets: parameters (total and active), layers, attention, what else they have (``facts``:
    id -> :func:`costmodel.model.memory.model_facts`)."""
    rows = [("id", "name", "params", "active", "layers", "d_model", "attention", "KV/token (bf16)", "features")]
    for m in presets:
        total, active = facts[m.id]["params"], facts[m.id]["active_params"]
        rows.append(
            (
                m.id,
                m.name,
                _params(total),
                _params(active) if active != total else "=",
                str(m.layers),
                str(m.d_model),
                m.attention_label,
                si(facts[m.id]["kv_bytes_per_token_bf16"], "B"),
                ", ".join(_model_features(m)),
            )
        )
    legend = [
        "",
        "Columns:",
        "  - params: every parameter; active: those one token runs through (= where all of them); attention: "
        "MHA, GQA or MQA with g key/value heads, or MLA's latent and rotary widths; KV/token: the KV cache one "
        "token takes over every layer, in bf16; features: mixture of experts (experts x per token), windows, "
        "encoder-decoder",
    ]
    return "\n".join([*aligned(rows, right={2, 3, 4, 5, 7}), *legend])


def model_detail(m, facts: dict) -> str:
    """One model's shape, parameters by kind, and source (``facts``: :func:`costmodel.model.memory.model_facts`)."""
    groups = facts["groups"]
    lines = [
        f"{m.name} [{m.id}]" + (f"  aliases: {', '.join(m.aliases)}" if m.aliases else ""),
        f"  parameters {_params(sum(groups.values()))}: projections {_params(groups['projections'])}, "
        f"embeddings {_params(groups['embeddings'])}, norms/biases/routers {_params(groups['other'])}"
        + (f"; active per token {_params(facts['active_params'])}" if m.moe else ""),
        f"  {m.architecture}, {m.layers} layers, d_model {m.d_model}, {m.heads} heads, {m.attention_label}, "
        f"head dim {m.head_dim}, {'gated ' if m.ffn_gated else ''}FFN {m.d_ff}, vocab {m.vocab}, {m.norm}"
        + (", rotary" if m.rope else "")
        + (", tied embeddings" if m.tied_embeddings else ""),
        f"  KV cache per token (bf16): {si(facts['kv_bytes_per_token_bf16'], 'B')}",
    ]
    if m.mla:
        a = m.mla
        lines.append(
            f"  MLA: latent {a.kv_rank}, rotary key {a.rope_dim}, key {a.nope_dim} + {a.rope_dim} and value "
            f"{a.value_dim} per head, " + (f"query latent {a.q_rank}" if a.q_rank else "no query latent")
        )
    if m.moe:
        e = m.moe
        lines.append(
            f"  MoE in {e.layers} of {m.layers} layers: {e.experts} experts of width {e.expert_d_ff}, "
            f"{e.experts_per_token} per token" + (f", shared width {e.shared_d_ff}" if e.shared_d_ff else "")
        )
    if m.sliding_window:
        lines.append(f"  sliding window {m.sliding_window} in {m.local_layers} of {m.layers} layers")
    if m.quantization:
        q = m.quantization
        lines.append(
            ("  routed experts' weights " if q.scope == "experts" else "  weights ")
            + q.weight_dtype
            + (f", groups of {q.group_size}" if q.group_size else "")
            + (f" ({q.method})" if q.method else "")
        )
    lines.append(f"  source: {m.source}")
    if m.notes:
        lines.append(f"  notes: {m.notes}")
    return "\n".join(lines)


def request_table(requests) -> str:
    """Requests side by side (one row per device or layout): TTFT, TPOT, end-to-end, throughput, memory."""
    first = requests[0]
    lines = [
        f"{first.model_name} [{first.model}]: batch {first.batch:,}, input {first.input_len:,} tokens, output "
        f"{first.output_len:,} tokens" + (f", {first.tp} devices (tensor parallel)" if first.tp > 1 else ""),
        "",
    ]
    rows = [
        (
            "device",
            "attention",
            "TTFT",
            "TPOT first",
            "TPOT last",
            "TPOT mean",
            "end-to-end",
            "tok/s/seq",
            "tok/s/device",
            "memory",
            "fits",
            "time model",
        )
    ]
    for r in requests:
        memory = r.kv_cache_bytes_per_device + r.weight_bytes_per_device
        rows.append(
            (
                r.hardware.id,
                r.attention,
                si(r.ttft_s, "s"),
                si(r.tpot_first_s, "s"),
                si(r.tpot_last_s, "s"),
                si(r.tpot_mean_s, "s"),
                si(r.e2e_s, "s"),
                si(r.tokens_per_s_per_sequence),
                si(r.tokens_per_s_per_device),
                f"{si(memory, 'B')} / {capacity_text(r.capacity_bytes)}",
                "yes" if r.fits else "NO",
                r.hardware.efficiency or "datasheet roofline",
            )
        )
    lines += aligned(rows, right=set(range(2, 10)))
    ranged = [r for r in requests if r.ttft_band is not None]
    if ranged:
        lines.append("")
        lines += [
            f"range on {r.hardware.id} ({r.attention}): TTFT {band_cell(r.ttft_band)}, TPOT mean "
            f"{band_cell(r.tpot_band)}, end-to-end {band_cell(r.e2e_band)}"
            for r in ranged
        ]
    lines += [
        "",
        "Columns:",
        "  - TTFT: the batch's prompts prefilled together; TPOT first, last, mean: the first, "
        "last and mean decode step; end-to-end: TTFT + every step; tok/s/seq: one sequence's output tokens a "
        "second over its decode steps; tok/s/device: the batch's, per device; memory: weights and the KV cache "
        "at the longest context, per device, against its capacity; time model: how the device's times were "
        "priced (fitted, transferred or the datasheet roofline)",
        "",
        "Assumptions:",
        *(f"  - {a}" for a in first.assumptions),
    ]
    return "\n".join(lines)


def capacity_table(report) -> str:
    """The largest batch under the targets, per device and attention layout."""
    targets = [
        f"mean TPOT <= {si(report.tpot_target_s, 's')}" if report.tpot_target_s else "",
        f"TTFT <= {si(report.ttft_target_s, 's')}" if report.ttft_target_s else "",
    ]
    targets = [t for t in targets if t] or ["memory only"]
    lines = [
        f"capacity: input {report.input_len:,} tokens, output {report.output_len:,} tokens; " + ", ".join(targets),
        "",
    ]
    head = ["device", "model", "attention", "batch", "binds", "memory batch", "TTFT", "TPOT mean", "tok/s/device"]
    if report.price_per_hour is not None:
        head.append(f"$/M tokens (at ${report.price_per_hour:g}/h)")
    rows = [tuple(head)]
    for p in report.points:
        r = p.request
        row = [
            p.device,
            p.model,
            p.attention,
            count(p.batch),
            p.binds or "",
            count(p.memory_batch),
            si(r.ttft_s, "s") if r else "-",
            si(r.tpot_mean_s, "s") if r else "-",
            si(r.tokens_per_s_per_device) if r else "-",
        ]
        if report.price_per_hour is not None:
            row.append(f"{p.cost_per_million_tokens:.3g}" if p.cost_per_million_tokens is not None else "-")
        rows.append(tuple(row))
    lines += aligned(rows, right={3, 5, 6, 7, 8, 9})
    lines += [
        "",
        "Columns:",
        "  - batch: the largest batch under the targets; binds: the target or the memory that "
        "stops a larger one; memory batch: the largest that fits in memory alone; TTFT, TPOT mean, tok/s/device: "
        "at that batch",
        "",
        "Assumptions:",
        *(f"  - {a}" for a in report.assumptions),
    ]
    return "\n".join(lines)


def devices_table(predictions) -> str:
    """Whole-model predictions side by side: one row per device (and attention layout)."""
    first = predictions[0]
    w = first.workload
    lines = [
        f"{first.model.name} [{first.model.id}]: batch {w.batch}, context {w.context}, {w.dtype}"
        + (f", {first.hardware.devices} devices (tensor parallel)" if first.hardware.devices > 1 else ""),
        "",
    ]
    rows = [
        (
            "device",
            "attention",
            "TPOT",
            "tokens/s",
            "TTFT",
            "KV cache",
            "weights",
            "capacity",
            "fits",
            "largest batch",
            "time model",
        )
    ]
    for p in predictions:
        mem = p.memory
        rows.append(
            (
                p.hardware.id,
                p.model.attention,
                si(p.total.tpot_s, "s"),
                si(p.total.tokens_per_s),
                si(p.total.ttft_s, "s"),
                si(mem.kv_cache_bytes_per_device, "B"),
                si(mem.weight_bytes_per_device, "B"),
                capacity_text(mem.capacity_bytes),
                "yes" if mem.fits else "NO",
                str(mem.max_batch),
                p.hardware.efficiency or "datasheet roofline",
            )
        )
    lines += aligned(rows, right=set(range(2, 10)))
    lines += [
        "",
        "Assumptions (first row; every row states its own in --json):",
        *(f"  - {a}" for a in first.assumptions),
    ]
    return "\n".join(lines)


def model_sweep_table(records: list[dict], dim: str) -> str:
    """A whole-model sweep: one row per value, one column group per (device, layout); * = does not fit."""
    keys = list(dict.fromkeys((r["device"], r["attention"]) for r in records))
    values = list(dict.fromkeys(r[dim] for r in records))
    by = {(r["device"], r["attention"], r[dim]): r for r in records}
    request = "e2e_s" in records[0]
    head = [dim.replace("_", " ")]
    for device, attention in keys:
        label = f"{device} {attention}" if len({k[0] for k in keys}) > 1 else attention
        head += [f"{label} TPOT", "tok/s/device"] + (["TTFT"] if request else [])
    rows = [tuple(head)]
    for v in values:
        row = [str(v)]
        for device, attention in keys:
            r = by[(device, attention, v)]
            mark = "" if r["fits"] else " *"
            row += [si(r["tpot_s"], "s") + mark, si(r["tokens_per_s_per_device"])] + (
                [si(r["ttft_s"], "s")] if request else []
            )
        rows.append(tuple(row))
    what = "requests" if request else "decode step and prefill"
    return "\n".join(
        [
            f"whole-model sweep of {dim.replace('_', ' ')} ({what}); TPOT "
            + ("mean over the request's steps" if request else "of one decode step")
            + "; * = weights and KV cache do not fit in memory",
            *aligned(rows, right=set(range(len(head)))),
        ]
    )


def model_records(presets, facts: dict[str, dict]) -> list[dict]:
    """The model list as rows."""
    return [
        {
            "id": m.id,
            "name": m.name,
            "params": facts[m.id]["params"],
            "active_params": facts[m.id]["active_params"],
            "layers": m.layers,
            "d_model": m.d_model,
            "attention": m.attention_label,
            "kv_bytes_per_token_bf16": facts[m.id]["kv_bytes_per_token_bf16"],
            "features": ", ".join(_model_features(m)),
        }
        for m in presets
    ]


#: Field name endings -> the unit their values are in (SI base units, printed with SI prefixes).
FIELD_UNITS = (
    ("_flops_per_s", "FLOP/s"),
    ("_bytes_per_s", "B/s"),
    ("capacity_bytes", None),
    ("_bytes", "B"),
    ("_hz", "Hz"),
    ("_s", "s"),
)


def with_unit(field: str, value: float) -> str:
    """A profile number as the table prints it: 2.04 TB/s, 80 GB (capacities as the vendor states them), 4 µs."""
    for name in field.split("."):
        for ending, unit in FIELD_UNITS:
            if name.endswith(ending):
                return capacity_text(value) if unit is None else si(value, unit)
    return f"{value:.6g}"
