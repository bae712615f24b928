"""Engine iterations priced against vLLM's own forward-pass records: Qwen3-32B (bf16) served by vLLM 0.20.1 under
Dynamo 1.2.0, tensor parallel over 1, 2 and 8 GPUs, every iteration's prefill tokens (and the positions its
chunks start after), decode sequences (and their cached positions in all) and measured time.

    python benchmarks/fpm_iterations.py

Source: ai-dynamo/aiconfigurator, fpm_golden_runs/fpm_upfront_qwen32_full_once_20260613_194007/tp{1,2,8}_ep1_past4096/
fpm_metrics_detail.csv (commits abbac64 and 78bd940; Apache-2.0), the "sweep" segment: single prompts of 128, 1024 and
4096 tokens, decode batches after 4096 positions, and the mixed iterations of 16 requests arriving together. The
rows below are the median of the six repeats of each single prompt, and the first record of every other kind
(the TP1 file's 4097 + 2 iteration has its decode sequences after 8193 positions, the others after 8194), copied as
the files give them. The files do not name the GPU: a 4096-token prefill at 1.3 PFLOP/s of bf16 and a batch-1 decode
reading the 65.5 GB of weights in 13.2 ms are beyond any Hopper part (989 TFLOP/s, 4.8 TB/s at most), so the rows
are priced on the B200 profile, an inference stated as such.

Each iteration is priced by the serving simulation's own iteration model (costmodel.engine.iteration.IterationTable:
the per-token ops over all its tokens, each prefill chunk's attention after its start, the decode attention at the
mean context, the head) with vLLM's kernel conventions (costmodel.engine.config: its all-reduce entry point), without
the engine's fixed cost per iteration (vLLM's asynchronous scheduling overlaps it
with the forward pass these records time). In every saturated mixed iteration prefill and decode tokens add up to
8192 exactly: the engine's token budget in these runs, although their vllm_metadata.json reports 2048.
"""

from __future__ import annotations

import numpy as np

from costmodel.engine.config import engine
from costmodel.engine.iteration import IterationTable
from costmodel.hardware.catalog import load_profile
from costmodel.model.presets import load_model
from costmodel.model.pricing import pricing

#: (what, prefill tokens, prefill requests, positions the chunks start after in all, decode sequences, their
#: cached positions in all, {tp: measured ms})
ROWS = [
    ("prompt of 128", 128, 1, 0, 0, 0, {1: 16.05, 2: 11.12, 8: 7.61}),
    ("prompt of 1024", 1024, 1, 0, 0, 0, {1: 53.10, 2: 33.37, 8: 17.63}),
    ("prompt of 4096", 4096, 1, 0, 0, 0, {1: 204.64, 2: 115.01, 8: 49.21}),
    ("decode 1 after 4099", 0, 0, 0, 1, 4099, {1: 13.769, 2: 9.123, 8: 4.549}),
    ("decode 4 after 16400", 0, 0, 0, 4, 16400, {1: 14.028, 2: 9.424, 8: 4.715}),
    ("decode 14 after 57386", 0, 0, 0, 14, 57386, {1: 16.364, 2: 10.164, 8: 5.024}),
    ("mixed 8191 + 1", 8191, 2, 0, 1, 4097, {1: 405.125, 2: 228.091, 8: 97.231}),
    ("mixed 8190 + 2", 8190, 3, 4095, 2, 8194, {1: 408.055, 2: 236.059, 8: 96.650}),
    ("mixed 8181 + 11", 8181, 3, 4065, 11, 45081, {1: 410.321, 2: 237.225, 8: 96.607}),
    ("mixed 4138 + 13", 4138, 2, 4054, 13, 53284, {1: 210.043, 2: 126.224, 8: 51.221}),
    ("mixed 4097 + 2", 4097, 2, 4095, 2, 8194, {1: 204.148, 2: 123.631, 8: 50.913}),
    ("mixed 49 + 13", 49, 1, 4047, 13, 53284, {1: 16.730, 2: 15.075}),
]


def chunks(tokens: int, requests: int, started: int) -> list[tuple[int, int]]:
    """The prefill chunks of an iteration as (start, length): the tokens and earlier positions shared evenly."""
    if not requests:
        return []
    return [(started // requests, tokens // requests + (1 if i < tokens % requests else 0)) for i in range(requests)]


def main():
    m, hw = load_model("Qwen/Qwen3-32B"), load_profile("b200")
    print("measured / predicted per iteration, Qwen3-32B bf16 on B200 (inferred), vLLM 0.20.1:")
    print(f"  {'iteration':24s} " + "  ".join(f"TP{tp}: meas / pred" for tp in (1, 2, 8)))
    ratios: dict[int, list[float]] = {1: [], 2: [], 8: []}
    kernels = {tp: engine("vllm", capacity_bytes=hw.engine_memory, device_name=hw.name, tp=tp).kernels for tp in ratios}
    tables = {
        tp: IterationTable(m, pricing(m, hw, tp=tp, **kernels[tp]), max_tokens=8192, max_seqs=64, max_context=65536)
        for tp in ratios
    }
    for what, pt, pn, started, dn, dkv, measured in ROWS:
        cells = []
        for tp, table in tables.items():
            if tp not in measured:
                cells.append(" " * 24)
                continue
            t = table.time(decode_seqs=dn, decode_context_sum=dkv, chunks=chunks(pt, pn, started), outputs=dn + pn)
            r = measured[tp] / (t.total_s * 1e3)
            ratios[tp].append(r)
            cells.append(f"{measured[tp]:7.1f} / {t.total_s * 1e3:7.1f} ms {r:4.2f}")
        print(f"  {what:24s} " + "  ".join(cells))
    every = np.concatenate([np.array(v) for v in ratios.values()])
    err = np.abs(1 / every - 1) * 100
    print(
        f"\n{every.size} iterations: median |error| {np.median(err):.1f}%, p90 {np.percentile(err, 90):.1f}%; "
        f"measured / predicted {every.min():.2f} - {every.max():.2f}"
    )


if __name__ == "__main__":
    main()
