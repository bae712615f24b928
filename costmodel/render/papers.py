"""The papers' tables as text: Shazeer's, the GQA paper's and DeepSeek's, and the validation summary."""

from __future__ import annotations

import textwrap

from costmodel.render.text import aligned, si


def validation_summary(report: dict) -> str:
    """Error per group and profile, the speed-ups, and the FLOP cross-check."""
    env = report["environment"]
    lines = [
        f"{env['device_name']} ({env['backend']}), torch {env['torch_version']}",
        f"timing: {env['timing_method']}",
        f"{len(report['rows'])} rows (ops and whole steps), {len(report['skipped'])} skipped (cases or dtypes); "
        f"FLOP cross-check (FlopCounterMode = symbolic): {'all passed' if report['flop_check_passed'] else 'FAILED'}",
        "",
    ]
    names = list(report["summary"])
    head = ("group", "n", *[f"{name} median |err|" for name in names], *[f"{name} p90 |err|" for name in names])
    rows = [head]
    for group, stats in report["summary"][names[0]].items():
        per = [report["summary"][name][group] for name in names]
        rows.append(
            (
                group,
                str(stats["n"]),
                *[f"{p['median_abs_error_pct']:.0f}%" for p in per],
                *[f"{p['p90_abs_error_pct']:.0f}%" for p in per],
            )
        )
    lines += aligned(rows, right=range(1, len(head)))
    lines += ["", "speed-up over MHA of the whole step, measured and predicted:"]
    for sp in report["speedups"]:
        shape = f"b={sp['b']}, m={sp['m']}" if sp["mode"] == "incremental" else f"n=m={sp['n']}"
        predicted = ", ".join(
            f"{name} {sp[f'predicted_{name}']:.2f}x ({sp[f'error_{name}_pct']:+.0f}%)" for name in names
        )
        lines.append(
            f"  {sp['variant'].upper()} (g={sp['g']}) {sp['mode']} {shape} {sp['dtype']} {sp['execution']}: "
            f"measured {sp['measured']:.2f}x; predicted {predicted}"
        )
    for skip in report["skipped"]:
        if "variant" not in skip:  # a whole dtype
            lines.append(f"  skipped dtype {skip['dtype']}: {skip['reason']}")
            continue
        lines.append(f"  skipped {skip['variant']} {skip['mode']} b={skip['b']} m={skip['m']}: {skip['reason']}")
    return "\n".join(lines)


def shazeer_table(r: dict) -> str:
    """The asymptotic ratios and Table 2's decoder time per token, model beside paper."""
    lines = [
        "Shazeer 2019, 'Fast Transformer Decoding: One Write-Head is All You Need'",
        "",
        "Memory/arithmetic of incremental decoding across n calls (derived | paper):",
    ]
    for a in r["asymptotic"]:
        how = "holds" if a["extra_assumption"] is None else f"holds if {a['extra_assumption'].split(':')[0]}"
        derived = a["derived_with_extra"] or a["derived"]
        lines.append(f"  {a['variant'].upper()}: Θ({derived})  |  Θ({a['paper']})  {how}")
        if a["extra_assumption"]:
            lines.append(f"       without it, derived: Θ({a['derived']})")
    p = r["paper"]
    lines += ["", "Table 2, decoder, TPUv2-microseconds per output token:", "  " + r["setup"], ""]
    head = ("model", "multi-head", "multi-query", "ratio")
    rows = [
        head,
        ("paper (Table 2)", f"{p['mha_us_per_token']:.1f} µs", f"{p['mqa_us_per_token']:.1f} µs", f"{p['ratio']:.1f}x"),
    ]
    rows += [
        (t["model"], f"{t['mha_us_per_token']:.1f} µs", f"{t['mqa_us_per_token']:.2f} µs", f"{t['ratio']:.2f}x")
        for t in r["table2"]
    ]
    lines += aligned(rows, right=range(1, 4), indent="  ")
    last = r["table2"][-1]
    lines += [
        "",
        f"The plain roofline gives {r['table2'][0]['ratio']:.1f}x; with every mechanism, "
        f"{last['ratio']:.1f}x against the paper's {p['ratio']:.1f}x "
        f"(multi-head {last['mha_us_per_token'] / p['mha_us_per_token']:.0%} of the paper's time, "
        f"multi-query {last['mqa_us_per_token'] / p['mqa_us_per_token']:.0%}). What is left is not explained "
        "by these mechanisms; switch each off with --no-... to see its share.",
    ]
    mt = r["mesh_tensorflow"]
    lines += [
        "",
        f"As mesh-tensorflow's incremental decoding ran the experiments (bf16 caches updated by a one-hot "
        f"multiply-add that reads and writes the whole cache each step, f32 weights, each core its own copy): "
        f"multi-head {mt['mha_us_per_token']:.2f} µs, multi-query {mt['mqa_us_per_token']:.2f} µs, "
        f"{mt['ratio']:.2f}x.",
    ]
    b = r["bound"]
    lines += [
        "",
        f"No per-byte mechanism reaches {p['ratio']:.1f}x. A step is a part that is not the cache's and a cache part; "
        f"multi-query's first part is at least multi-head's (the model here: {b['model_not_cache_us']['mqa']:.2f} "
        f"against {b['model_not_cache_us']['mha']:.2f} µs, its feed-forward wider for the same parameters), and a "
        f"cache costs multi-head at most {b['heads']}x what it costs multi-query (its bytes {b['heads']}x, its FLOPs the "
        f"same), so multi-head stays below {b['heads']}x multi-query. At the paper's "
        f"multi-query {p['mqa_us_per_token']:.1f} µs, multi-head is at most {b['paper_mha_most_us']:.1f} µs: the "
        f"paper's {p['mha_us_per_token']:.1f} µs holds at least {b['paper_mha_beyond_us']:.1f} µs of multi-head cost "
        f"({b['paper_mha_beyond_us'] / p['mha_us_per_token']:.0%}) that no cost per byte of cache explains, stated "
        "here rather than fitted.",
    ]
    loc = r["local"]
    per, paper = loc["us_per_position"], loc["paper"]
    lines += [
        "",
        f"Table 2's local rows (self-attention over the last {loc['positions']} positions): paper "
        f"{paper['mha']:.1f} / {paper['mqa']:.1f} µs, model {loc['model']['mha_us_per_token']:.1f} / "
        f"{loc['model']['mqa_us_per_token']:.2f} µs. One more self-attention position costs multi-head "
        f"{per['paper']['mha']:.3f} µs per token in the paper and {per['model']['mha']:.3f} µs in the model "
        f"({per['paper']['mha'] / per['model']['mha']:.1f}x), multi-query {per['paper']['mqa']:.4f} and "
        f"{per['model']['mqa']:.4f} µs: the multi-head gap grows with the cache, a cost per cached "
        "position and head that none of the mechanisms above carries.",
    ]
    return "\n".join(lines)


def gqa_table(r: dict) -> str:
    lines = ["Ainslie et al. 2023, GQA: time per sample against key/value groups", "  " + r["setup"], ""]
    rows = [("groups", "batch", "prefill", "decode (512 steps)", "chip-ms per sample")]
    for x in r["rows"]:
        if x.get("chip_ms_per_sample") is None:
            rows.append((str(x["groups"]), "0", "", "", "does not fit"))
        else:
            rows.append(
                (
                    str(x["groups"]),
                    str(x["batch"]),
                    si(x["prefill_s"], "s"),
                    si(x["decode_s"], "s"),
                    f"{x['chip_ms_per_sample']:.0f}",
                )
            )
    lines += aligned(rows, right=range(5), indent="  ")
    ours = {x["groups"]: x.get("chip_ms_per_sample") for x in r["rows"]}
    if all(ours.get(g) for g in (1, 8, 64)):
        lines += [
            "",
            f"  {r['paper']}; model: 8 groups / multi-query {ours[8] / ours[1]:.2f}x, multi-head / 8 groups "
            f"{ours[64] / ours[8]:.2f}x",
        ]
        steps = [("model, chip-ms per sample", "MQA", "8 groups", "MHA", "MHA / MQA")]
        for step in r.get("steps", ()):
            ms = [step[f"g{g}_chip_ms_per_sample"] for g in (1, 8, 64)]
            if all(ms):
                steps.append((step["model"], *(f"{x:.0f}" for x in ms), f"{ms[2] / ms[0]:.2f}x"))
        lines += [""] + aligned(steps, right=range(1, 5), indent="  ")
    lines += [""] + textwrap.wrap(
        r["table1"]["why"] + ".", 116, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False
    )
    return "\n".join(lines)


def deepseek_table(result: dict) -> str:
    """DeepSeek-V2 against DeepSeek 67B: the KV cache per token and the most generation throughput."""
    kv, red, paper = result["kv_bytes_per_token"], result["kv_reduction"], result["paper"]
    lines = [
        "KV cache per token (every layer, counted from the programs):",
        f"  DeepSeek 67B (GQA, 8 kv heads of 128, 95 layers, bf16)    {kv['deepseek_llm_67b']:>9,.0f} bytes",
        f"  DeepSeek-V2 (MLA latent 512 + rotary key 64, 60 layers)    {kv['deepseek_v2_bf16']:>9,.0f} bytes in bf16,"
        f" {kv['deepseek_v2_6bit']:,.0f} at 6 bits",
        f"  reduction: {red['bf16']:.1%} in bf16, {red['fp8']:.1%} in fp8, {red['6bit']:.1%} at 6 bits "
        f"(paper: {paper['kv_reduction']:.1%}, with the cache at 6 bits)",
        "",
        f"Most generation throughput on {result['devices']} x {result['hw']} (paper: DeepSeek-V2 over "
        f"{paper['v2_tokens_per_s'] / 1e3:.0f}K tokens/s, {paper['throughput_ratio']}x DeepSeek 67B):",
    ]
    rows = [("model", "weights", "KV", "layout", "clients", "tokens/s", "TPOT", "x 67B")]
    for r in result["throughput"]:
        rows.append(
            (
                r["model"],
                r["weights"],
                r["kv_cache"],
                r["layout"] or "-",
                str(r["clients"] or "-"),
                f"{r['tokens_per_s']:,.0f}" if r["tokens_per_s"] else "-",
                f"{r['tpot_s'] * 1e3:.1f} ms" if r["tpot_s"] else "-",
                f"{r['ratio']:.2f}" if r["ratio"] else "-",
            )
        )
    lines += aligned(rows, right={4, 5, 6, 7}, indent="  ")
    lines += ["", f"Setup: {result['setup']}"]
    return "\n".join(lines)
