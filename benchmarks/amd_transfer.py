"""What carrying the NVIDIA fits to AMD's GPUs does to served predictions: DeepSeek-R1 (fp8, tensor parallel 8) on
the MI300X, MI325X and MI355X under SGLang, ATOM and vLLM, at 1k/1k and 8k/1k tokens and 4-64 clients, priced as
before (no transfer to another vendor: the datasheet roofline, PEER_GENERATIONS emptied) and as now (the H100's or
the B200's fitted classes carried by the transfer rule, AITER's fused MoE blocks, the baseboard's mesh). Each side
runs in its own process, so no cache carries between them. Prints each point's TTFT and TPOT both ways and the
median ratio per GPU and engine.

No measured AMD deployment is here: the ratios say how far the predictions moved, not how right they are.

    python benchmarks/amd_transfer.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

GPUS = ("mi300x", "mi325x", "mi355x")
ENGINES = ("sglang", "atom", "vllm")
LOADS = [(1024, 1024, c) for c in (4, 16, 64)] + [(8192, 1024, c) for c in (4, 16, 64)]


def _run(roofline: bool) -> dict:
    import costmodel
    from costmodel.price import origin

    if roofline:
        origin.PEER_GENERATIONS.clear()
    m = costmodel.load_model("deepseek-r1")
    out = {}
    for gpu in GPUS:
        hw = costmodel.load_profile(gpu)
        for eng in ENGINES:
            for isl, osl, c in LOADS:
                load = costmodel.Load(input_len=isl, output_len=osl, concurrency=c, num_requests=4 * c)
                p = costmodel.serve(m, hw, load, layout=costmodel.Layout(tp=8), engine_name=eng)
                out[f"{gpu} {eng} {isl}/{osl} c={c}"] = (p.ttft_s, p.tpot_s)
    return out


def main() -> None:
    if len(sys.argv) > 1:
        print(json.dumps(_run(sys.argv[1] == "roofline")))
        return
    got = {
        side: json.loads(
            subprocess.run([sys.executable, __file__, side], capture_output=True, text=True, check=True).stdout
        )
        for side in ("roofline", "transfer")
    }
    print(f"{'point':34s} {'TTFT before':>12s} {'now':>8s} {'TPOT before':>12s} {'now':>8s}")
    for key, (t0, p0) in got["roofline"].items():
        t1, p1 = got["transfer"][key]
        print(f"{key:34s} {t0 * 1e3:10.0f}ms {t1 * 1e3:6.0f}ms {p0 * 1e3:10.1f}ms {p1 * 1e3:6.1f}ms")
    print("\nmedian now / before, per GPU and engine (TTFT, TPOT):")
    for gpu in GPUS:
        for eng in ENGINES:
            keys = [k for k in got["roofline"] if k.startswith(f"{gpu} {eng} ")]
            ratio = [tuple(got["transfer"][k][i] / got["roofline"][k][i] for i in (0, 1)) for k in keys]
            ttft = statistics.median(r[0] for r in ratio)
            tpot = statistics.median(r[1] for r in ratio)
            print(f"  {gpu:7s} {eng:7s} {ttft:5.2f} {tpot:5.2f}")


if __name__ == "__main__":
    main()
