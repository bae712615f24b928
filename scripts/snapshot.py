"""Records what the shipped commands print, so that a change meant to keep behaviour (a move, a rename, a split)
can be held to byte-identical outputs: attention on three GPUs, twelve presets' steps and requests, served runs on
every engine (one disaggregated), a capacity, two plans, derivations, and every served row of the published H100
deployments (``validate --serving``, with ``--serving``; about 30 s).

    python scripts/snapshot.py record DIR [--serving]
    python scripts/snapshot.py compare DIR        # exit 1 and the first differing lines where any output differs
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
SERVING = ROOT.parent / "shared" / "measurements" / "serving" / "silicon_sample_h100_sxm.csv"
MODELS = (
    "llama-3-8b",
    "llama-3.1-70b",
    "llama-2-7b",
    "qwen3-32b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "deepseek-v2-lite",
    "mixtral-8x7b",
    "gpt-oss-20b",
    "gemma-2-9b",
    "falcon-7b",
    "t5-xxl",
)
ENGINE = ["--input-len", "1024", "--output-len", "128", "--concurrency", "16", "--num-requests", "48"]


def commands() -> dict[str, list[str]]:
    """name -> arguments of every recorded command (each printed as a table and as --json)."""
    out: dict[str, list[str]] = {}
    for gpu in ("a100", "h100", "b200"):
        out[f"attention-{gpu}"] = ["predict", "--gpu", gpu]
        out[f"attention-{gpu}-batched"] = ["predict", "--gpu", gpu, "--mode", "batched", "--seq", "512"]
    out["attention-devices"] = ["predict", "--gpu", "a100", "--gpu", "h100", "--gpu", "b200"]
    for model in MODELS:
        out[f"step-{model}"] = ["predict", "--gpu", "h100", "--model", model]
        out[f"request-{model}"] = [
            "predict",
            "--gpu",
            "h100",
            "--model",
            model,
            "--input-len",
            "2048",
            "--output-len",
            "256",
        ]
    for engine in ("vllm", "sglang", "trtllm"):
        out[f"served-{engine}"] = ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--engine", engine, *ENGINE]
    out["served-steady"] = [*out["served-vllm"], "--evaluator", "steady-state"]
    out["served-open"] = [
        "predict",
        "--gpu",
        "h100",
        "--model",
        "qwen3-32b",
        "--tp",
        "2",
        "--engine",
        "vllm",
        "--request-rate",
        "4",
        "--input-len",
        "1024",
        "--output-len",
        "128",
        "--num-requests",
        "64",
    ]
    out["served-disagg"] = [
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3.1-70b",
        "--engine",
        "trtllm",
        "--disaggregated",
        "--prefill-tp",
        "2",
        "--decode-tp",
        "4",
        *ENGINE,
    ]
    out["capacity"] = [
        "capacity",
        "--gpu",
        "h100",
        "--gpu",
        "a100",
        "--model",
        "llama-3-8b",
        "--input-len",
        "2048",
        "--output-len",
        "512",
        "--tpot-ms",
        "50",
    ]
    out["capacity-static"] = [*out["capacity"], "--batching", "static"]
    out["plan-8b"] = [
        "plan",
        "--gpu",
        "h100",
        "--model",
        "llama-3-8b",
        "--gpus",
        "2",
        "--input-len",
        "512",
        "--output-len",
        "64",
        "--tpot-ms",
        "30",
        "--max-concurrency",
        "16",
    ]
    out["plan-70b"] = [
        "plan",
        "--gpu",
        "h100",
        "--model",
        "llama-3.1-70b",
        "--gpus",
        "4",
        "--input-len",
        "2048",
        "--output-len",
        "256",
        "--tpot-ms",
        "50",
        "--max-concurrency",
        "32",
    ]
    for variant in ("mha", "gqa", "mqa", "mla"):
        out[f"derive-{variant}"] = ["derive", "--variant", variant, "--mode", "generate", "--asymptotic"]
    return out


def run(args: list[str]) -> str:
    from costmodel.cli.commands import main

    result = CliRunner().invoke(main, args)
    return f"exit {result.exit_code}\n{result.output}"


def record(folder: Path, serving: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, args in commands().items():
        (folder / f"{name}.txt").write_text(run(args), encoding="utf-8")
        (folder / f"{name}.json").write_text(run([*args, "--json"]), encoding="utf-8")
        print(name, flush=True)
    if serving:
        report = folder / "serving.json"
        print(run(["validate", "--serving", str(SERVING), "--json", str(report)]).splitlines()[0])
        rows = json.loads(report.read_text(encoding="utf-8"))
        report.write_text(json.dumps(rows, indent=1, sort_keys=True), encoding="utf-8")


def compare(folder: Path) -> int:
    scratch = folder.with_name(folder.name + ".now")
    record(scratch, (folder / "serving.json").exists())
    differ = 0
    for before in sorted(folder.iterdir()):
        now = scratch / before.name
        if before.read_bytes() != now.read_bytes():
            differ += 1
            diff = difflib.unified_diff(before.read_text().splitlines(), now.read_text().splitlines(), lineterm="", n=0)
            print(f"DIFFERS: {before.name}\n" + "\n".join(list(diff)[2:12]))
    print(f"{differ} of {len(list(folder.iterdir()))} outputs differ")
    return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["record", "compare"])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--serving", action="store_true", help="also every served row of the H100 deployments")
    args = parser.parse_args()
    if args.action == "record":
        record(args.folder, args.serving)
    else:
        sys.exit(compare(args.folder))


if __name__ == "__main__":
    main()
