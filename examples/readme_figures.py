"""Make the figures shown in README.md (docs/roofline.png, docs/sweep.png, docs/throughput_latency.png).

python examples/readme_figures.py
"""

from pathlib import Path

from costmodel.cli.commands import main

DOCS = Path(__file__).resolve().parents[1] / "docs"

FIGURES = [
    # every op of MHA, GQA and MQA (decode step and prefill) under the A100 and H100 rooflines
    ["roofline", "--gpu", "a100", "--gpu", "h100", "--out", str(DOCS / "roofline.png")],
    # Llama 3 8B and its MHA and MQA versions on an H100: throughput against latency, one point per batch
    [
        "sweep",
        "--gpu",
        "h100",
        "--model",
        "llama-3-8b",
        "--variants",
        "--x",
        "batch",
        "--range",
        "1:512:x2",
        "--input-len",
        "2048",
        "--output-len",
        "256",
        "--out",
        str(DOCS / "throughput_latency.png"),
    ],
    # a 32-layer 7-8B-class attention stack on an H100 (attention only): decode latency and tokens/s against context
    [
        "sweep",
        "--gpu",
        "h100",
        "--x",
        "context",
        "--range",
        "128:131072:x2",
        "--layers",
        "32",
        "--out",
        str(DOCS / "sweep.png"),
    ],
]

if __name__ == "__main__":
    DOCS.mkdir(exist_ok=True)
    for args in FIGURES:
        main(args, standalone_mode=False)
