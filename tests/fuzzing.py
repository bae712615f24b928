"""Generated command lines and files for fuzzing the CLI: valid and invalid values mixed.

Used by ``tests/test_fuzz.py`` (a few hundred examples on every test run) and by
``benchmarks/fuzz_cli.py`` (tens of thousands, counting failures instead of stopping at the first).
A generated case passes when the command exits 0 (with finite JSON when JSON was asked for) or exits
non-zero with exactly one ``Error:`` line and no traceback. How long a case took is the benchmark's to report
(:func:`timed_check`), never a test's verdict: a hang is caught by the suite's timeout.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import yaml
from click.testing import CliRunner
from hypothesis import strategies as st

from costmodel.cli.commands import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILE = os.path.join(ROOT, "hardware_profiles", "a100_80gb_sxm.yaml")
SCRATCH = tempfile.mkdtemp(prefix="costmodel-fuzz-")

junk = st.text(max_size=6) | st.sampled_from(["", " ", "-1", "1e9", "nan", "inf", "0x10", "１", "x" * 300])
integers = st.integers(-3, 70_000) | st.sampled_from([0, 1, 2**40, 2**40 + 1, 10**155, 2**63])
numbers = integers.map(str) | junk


def choice(valid: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(valid) | st.sampled_from([v.upper() for v in valid]) | junk


@st.composite
def profile_file(draw) -> str:
    """A profile YAML with one field broken (wrong type, zero, negative, non-finite, missing), or junk bytes."""
    data = yaml.safe_load(open(PROFILE, encoding="utf-8"))
    field = draw(st.sampled_from(sorted(data)))
    kind = draw(st.sampled_from(["value", "drop", "bytes"]))
    if kind == "bytes":
        content = draw(st.binary(max_size=200))
    else:
        if kind == "drop":
            data.pop(field)
        else:
            bad = draw(st.sampled_from([0, -1, float("inf"), float("nan"), "text", [], {}, None, True, 1e400]))
            target = data[field]
            if isinstance(target, dict) and "value" in target:
                target["value"] = bad
            elif isinstance(target, dict) and target:
                inner = next(iter(target))
                target[inner] = {"value": bad} if isinstance(target[inner], dict) else bad
            else:
                data[field] = bad
        content = yaml.safe_dump(data).encode()
    path = os.path.join(SCRATCH, f"profile-{draw(st.integers(0, 10**9))}.yaml")
    with open(path, "wb") as f:
        f.write(content)
    return path


CONFIG = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "intermediate_size": 512,
    "hidden_act": "silu",
}


@st.composite
def config_file(draw) -> str:
    """A config.json with one key set to a wrong value, or removed, or text that is not JSON."""
    cfg = dict(CONFIG)
    key = draw(st.sampled_from(sorted(CONFIG) + ["head_dim", "tie_word_embeddings", "is_encoder_decoder"]))
    if draw(st.booleans()):
        cfg.pop(key, None)
    else:
        cfg[key] = draw(st.sampled_from([0, -4, 3, 7, "8", [8], {}, None, True, 1.5, 10**20]))
    text = json.dumps(cfg) if draw(st.integers(0, 9)) else draw(st.text(max_size=40))
    path = os.path.join(SCRATCH, f"config-{draw(st.integers(0, 10**9))}.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def output_path(suffixes: list[str]) -> st.SearchStrategy[str]:
    names = st.sampled_from(["out", "x" * 300, ""]) | st.text("ab", min_size=1, max_size=3)
    folders = st.sampled_from([SCRATCH, os.path.join(SCRATCH, "missing"), "/proc", "/"])
    return st.builds(lambda f, n, s: os.path.join(f, n + s), folders, names, st.sampled_from(suffixes + [".txt", ""]))


gpus = choice(["a100", "h100", "tpu-v5e", "l4", "b200", "epyc_9004_2vcpu"]) | profile_file()
models = (
    choice(
        [
            "llama-3-8b",
            "falcon-7b",
            "t5-xxl",
            "starcoder",
            "palm-540b",
            "mixtral-8x7b",
            "deepseek-v2-lite",
            "gemma-2-9b",
            "mistral-7b",
        ]
    )
    | config_file()
)
ranges = (
    st.builds(
        lambda a, b, c: f"{a}:{b}:{c}",
        numbers,
        numbers,
        st.one_of(numbers, numbers.map(lambda x: "x" + x), numbers.map(lambda x: "+" + x)),
    )
    | st.lists(numbers, min_size=1, max_size=4).map(",".join)
    | junk
)
dims = st.sampled_from(["batch", "seq", "context", "d-model", "heads", "groups", "head-dim", "value-dim"])

OPTIONS = {
    "--variant": choice(["mha", "mqa", "gqa"]),
    "--groups": numbers,
    "--mode": choice(["incremental", "batched", "generate"]),
    "--batch": numbers,
    "--seq": numbers,
    "--context": numbers,
    "--d-model": numbers,
    "--heads": numbers,
    "--head-dim": numbers,
    "--value-dim": numbers,
    "--dtype": choice(["bf16", "fp32", "fp8"]),
    "--layers": numbers,
    "--execution": choice(["fused", "unfused"]),
    "--overlap": choice(["max", "sum"]),
    "--cache-append": choice(["inplace", "concat"]),
}
MODEL_OPTIONS = {
    "--batch": numbers,
    "--context": numbers,
    "--tp": numbers,
    "--source": numbers,
    "--dtype": choice(["bf16", "fp16", "fp8", "bfloat16"]),
    "--variant": choice(["mha", "mqa", "gqa", "mla"]),
    "--groups": numbers,
    "--execution": choice(["fused", "unfused"]),
    "--seq": numbers,
    "--weight-dtype": choice(["int4", "fp8", "bf16"]),
    "--kv-dtype": choice(["fp8", "bf16"]),
    "--kv-heads": numbers,
    "--mla-form": choice(["naive", "absorbed"]),
    "--input-len": numbers,
    "--output-len": numbers,
    "--format": choice(["csv", "markdown", "table"]),
}
CAPACITY_OPTIONS = {
    "--tpot-ms": numbers,
    "--ttft-ms": numbers,
    "--price-per-hour": numbers,
    "--tp": numbers,
    "--weight-dtype": choice(["int4", "fp8"]),
    "--format": choice(["csv", "markdown", "json"]),
}


@st.composite
def flags(draw, options: dict, most: int = 4) -> list[str]:
    names = draw(st.lists(st.sampled_from(sorted(options)), max_size=most, unique=True))
    return [x for name in names for x in (name, draw(options[name]))]


@st.composite
def command_lines(draw) -> list[str]:
    """One command line of any costmodel command (the torch ones only with values they refuse quickly)."""
    kind = draw(
        st.sampled_from(
            [
                "predict",
                "predict",
                "model",
                "model",
                "capacity",
                "sweep-table",
                "derive",
                "hardware",
                "plot",
                "reproduce",
                "validate",
            ]
        )
    )
    json_flag = ["--json"] if draw(st.booleans()) else []
    if kind == "predict":
        return ["predict", "--gpu", draw(gpus), *draw(flags(OPTIONS)), *json_flag]
    if kind == "model":
        return ["predict", "--gpu", draw(gpus), "--model", draw(models), *draw(flags(MODEL_OPTIONS, 3)), *json_flag]
    if kind == "capacity":
        lengths = [
            x for name in ("--input-len", "--output-len") if draw(st.integers(0, 5)) for x in (name, draw(numbers))
        ]
        return [
            "capacity",
            "--gpu",
            draw(gpus),
            "--model",
            draw(models),
            *lengths,
            *draw(flags(CAPACITY_OPTIONS, 3)),
            *json_flag,
        ]
    if kind == "sweep-table":
        spec = draw(st.builds(lambda d, r: f"{d}={r}", dims | junk, ranges))
        csv = ["--csv", draw(output_path([".csv"]))] if draw(st.booleans()) else []
        return ["predict", "--gpu", draw(gpus), "--sweep", spec, *csv, *draw(flags(OPTIONS, 2)), *json_flag]
    if kind == "derive":
        derive_options = {k: v for k, v in OPTIONS.items() if k not in ("--layers", "--execution", "--overlap")}
        extra = ["--asymptotic"] if draw(st.booleans()) else []
        return ["derive", *draw(flags(derive_options, 3)), *extra, *json_flag]
    if kind == "hardware":
        return (
            draw(st.sampled_from([["hardware", "list"], ["hardware", "show"], ["models", "list"], ["models", "show"]]))
            + ([draw(st.one_of(gpus, models))] if draw(st.booleans()) else [])
            + json_flag
        )
    if kind == "plot":
        out = ["--out", draw(output_path([".png", ".svg", ".pdf"]))]
        if draw(st.booleans()):
            return [
                "roofline",
                "--gpu",
                draw(gpus),
                *out,
                *draw(flags({"--batch": numbers, "--context": numbers, "--dtype": OPTIONS["--dtype"]}, 2)),
            ]
        x = draw(choice(["context", "batch", "groups", "seq"]))
        return ["sweep", "--gpu", draw(gpus), "--x", x, "--range", draw(ranges), *out, *draw(flags(OPTIONS, 2))]
    if kind == "reproduce":
        which = draw(st.sampled_from(["shazeer2019", "gqa2023"]))
        extra = ["--f32-passes", draw(numbers)] if which == "shazeer2019" else ["--tp", draw(numbers)]
        return ["reproduce", which, *extra, *json_flag]
    # validate and calibrate: only options they refuse before measuring anything
    return draw(
        st.sampled_from(
            [
                ["validate", "--device", draw(junk)],
                ["calibrate", "--out", ""],
                ["calibrate", "--device", "tpu", "--out", "x.yaml"],
                ["validate", "--json", os.path.join(SCRATCH, "missing", draw(junk) + ".json")],
                ["validate", "--plot", os.path.join(SCRATCH, "plot" + draw(st.sampled_from([".txt", "", ".png/"])))],
            ]
        )
    )


def timed_check(args: list[str]) -> tuple[str | None, float]:
    """:func:`check` and the seconds the command took."""
    start = time.perf_counter()
    problem = check(args)
    return problem, time.perf_counter() - start


def check(args: list[str]) -> str | None:
    """Run one command line in-process; ``None`` when it passed, else what was wrong."""
    result = CliRunner().invoke(main, args)
    out = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return f"uncaught {type(result.exception).__name__}: {result.exception}"
    if "Traceback" in out:
        return "traceback in the output"
    if result.exit_code == 0:
        if "--json" in args and not any(a in args for a in ("--csv", "--out")):
            try:
                json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"non-finite {c}")))
            except ValueError as err:
                return f"invalid JSON: {err}"
        return None
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    if len(errors) != 1:
        return f"exit {result.exit_code} with {len(errors)} Error: lines: {out[-300:]!r}"
    if "internal error" in errors[0]:
        return errors[0]
    return None
