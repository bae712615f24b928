"""How a mixture of experts' router and layout move a served model's latency: Qwen3-235B-A22B on 8 H100s under vLLM,
its experts sharded over the 8 devices (tensor parallel) or spread whole over them (expert parallel, where vLLM's
fused MoE kernel also walks the rows routed to the other devices), with tokens routed at random, evenly, or by a
skewed power law (the busiest device timed).

    python examples/moe_routing.py
"""

from __future__ import annotations

import costmodel
from costmodel import Layout, Load

if __name__ == "__main__":
    hw = costmodel.load_profile("h100")
    base = costmodel.load_model("qwen3-235b-a22b")
    print(f"{base.name} on 8 x {hw.id}, vLLM, 32 clients, 2048 + 256 tokens")
    print(f"{'layout':22s} {'routing':14s} {'TTFT':>9s} {'TPOT':>9s} {'tok/s/device':>13s}")
    for label, expert_parallel in (("TP8, experts sharded", False), ("TP8, expert parallel", True)):
        for routing in ("uniform", "balanced", "power-law:1.2"):
            p = costmodel.serve(
                base.with_routing(routing),
                hw,
                Load(concurrency=32, input_len=2048, output_len=256),
                layout=Layout(tp=8, expert_parallel=expert_parallel),
                engine_name="vllm",
            )
            print(
                f"{label:22s} {routing:14s} {p.ttft_s * 1e3:7.0f} ms {p.tpot_s * 1e3:6.1f} ms "
                f"{p.output_tokens_per_s_per_device:13,.0f}"
            )
