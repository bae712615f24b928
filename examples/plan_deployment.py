"""Choose a deployment: every layout of Llama 3.1 70B on 8 H100s and on 8 MI300Xs (tensor parallel, replicas,
pipeline stages, disaggregated prefill and decode pools), their fronts of tokens/s per GPU against tokens/s per
user, and the best layout under a 50 ms TPOT target; then the chosen disaggregated layout served alone, with
its TTFT split into queueing, prefill, KV transfer and front end. Writes plan.png in the current folder.

    python examples/plan_deployment.py
"""

from pathlib import Path

import costmodel
from costmodel import Load
from costmodel.render.plan_figure import draw_plan
from costmodel.render.plots import save

OUT = Path("plan.png")

if __name__ == "__main__":
    model = costmodel.load_model("llama-3.1-70b")
    gpus = [costmodel.load_profile("h100"), costmodel.load_profile("mi300x")]
    plan = costmodel.plan(model, gpus, devices=8, input_len=2048, output_len=512, tpot_s=0.05)
    print(plan)
    save(draw_plan(plan), str(OUT))
    print(f"wrote {OUT}")
    best = plan.best[0]
    if best.mode == "disagg":
        served = costmodel.serve_disaggregated(
            model,
            gpus[0],
            Load(input_len=2048, output_len=512, concurrency=best.concurrency),
            prefill=costmodel.Pool(tp=best.prefill_tp, workers=best.prefill_workers),
            decode=costmodel.Pool(tp=best.decode_tp, workers=best.decode_workers),
        )
        print()
        print(served)
