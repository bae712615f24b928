"""Other engines' own kernel classes (the H100 profile's ``engine_kernels``, fitted by scripts/fit_engines.py on
SGLang's and TensorRT-LLM's timed kernels): used where their engine serves, vLLM's elsewhere, carried to other GPUs
by the transfer rule, and their stated errors re-derived from the tables they were fitted on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import costmodel
from costmodel.cli.commands import main
from costmodel.engine.config import engine
from costmodel.model.pricing import pricing

H100 = costmodel.load_profile("h100")
SHARED = Path(__file__).resolve().parents[2] / "shared" / "measurements" / "aiconfigurator" / "engines"
LLAMA = costmodel.load_model("meta-llama/Llama-3.1-8B")


def _resolved(hw, name):
    eng = engine(name, capacity_bytes=hw.engine_memory, device_name=hw.name, tp=1)
    return pricing(LLAMA, hw, **eng.kernels).model.resolved


def test_each_engine_prices_its_own_classes_and_vllms_elsewhere():
    from costmodel.price.origin import time_model

    assert set(H100.engine_kernels) == {"sglang", "trtllm"}
    vllm = _resolved(H100, "vllm")
    for name, own in H100.engine_kernels.items():
        served, kernels = _resolved(H100, name), time_model(H100, "graph", engine=name).resolved
        for cls, eff in kernels.classes.items():
            if cls in own.classes:  # its kernels one by one: every class fitted on them
                assert eff == own.classes[cls] and f" ({name}'s own kernel)" in kernels.origin[cls].notes
            else:
                assert eff == vllm.classes[cls]  # the bf16 GEMMs and the rest: vLLM's
            # its served runs: only the classes its measured deployments agree with
            assert served.classes[cls] == (own.classes[cls] if cls in own.served else vllm.classes[cls])
        assert own.served_why
    assert all("own kernel" not in "".join(o.notes) for o in vllm.origin.values())


def test_an_engines_classes_are_carried_to_a_gpu_nobody_timed_it_on():
    h200 = costmodel.load_profile("h200")
    got, vllm = _resolved(h200, "sglang"), _resolved(h200, "vllm")
    cls = H100.engine_kernels["sglang"].served[0]
    assert got.origin[cls].kind == "transferred" and got.origin[cls].device == "h100_sxm"
    assert " (sglang's own kernel)" in got.origin[cls].notes and got.classes[cls] != vllm.classes[cls]
    # a GPU with its own fit of the class (the A100's, on vLLM's kernels) keeps it
    a100 = costmodel.load_profile("a100")
    assert _resolved(a100, "sglang").classes[cls] == _resolved(a100, "vllm").classes[cls]


def test_served_engines_do_not_share_an_iteration_table_and_say_whose_kernels_ran():
    from costmodel import Load
    from costmodel.engine.served import pricing_key, serve

    keys = {
        pricing_key(pricing(LLAMA, H100, **engine(n, capacity_bytes=1e11, device_name=H100.name, tp=1).kernels))
        for n in ("vllm", "sglang")
    }
    assert len(keys) == 2
    p = serve(LLAMA, H100, Load(1024, 128, concurrency=8, num_requests=24), engine_name="sglang")
    line = next(a for a in p.assumptions if a.startswith("kernel times:"))
    assert "SGLang's own for decode_attention" in line
    p = serve(LLAMA, H100, Load(1024, 128, concurrency=8, num_requests=24), engine_name="trtllm")
    line = next(a for a in p.assumptions if a.startswith("kernel times:"))
    assert "TensorRT-LLM's own kernels were timed on h100_sxm" in line and "priced with these" in line


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"the engines' tables are not beside this checkout ({SHARED})")
def test_each_stated_engine_error_is_rederived_from_its_tables():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from fit_published import _err

    from costmodel.validation.published import read_folder

    tables = read_folder(SHARED)[0]
    bare = H100.model_copy(update={"efficiency": None})
    for name, own in H100.engine_kernels.items():
        for key, stated in own.error.items():
            cls = key.split("/")[0]
            mine = [t for t in tables if t.engine == name and t.priced_class == cls]
            got = _err(mine, bare, own.classes[cls])
            assert got["n"] == stated.n
            assert got["median_abs_error_pct"] == pytest.approx(stated.median_abs_error_pct, abs=0.01)
            assert got["p90_abs_error_pct"] == pytest.approx(stated.p90_abs_error_pct, abs=0.01)


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"the engines' tables are not beside this checkout ({SHARED})")
def test_an_engines_rows_are_reproduced_by_their_commands(tmp_path):
    import csv

    from costmodel.validation.published import read_folder
    from costmodel.validation.published_report import validate_published

    for name in (
        "h100_sxm_sglang_0.5.9_generation_attention_perf.csv",
        "h100_sxm_trtllm_1.2.0rc5_context_attention_perf.csv",
        "h100_sxm_trtllm_1.2.0rc5_gemm_perf.csv",
    ):
        with open(SHARED / "h100_sxm" / name, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("gemm_dtype", "fp8") == "fp8"]  # the GEMMs: TRT-LLM's fp8
        with open(tmp_path / name, "w", newline="") as f:
            out = csv.DictWriter(f, fieldnames=rows[0].keys())
            out.writeheader()
            out.writerows(rows[i] for i in range(0, len(rows), max(1, len(rows) // 30)))
    report = validate_published(read_folder(tmp_path)[0])
    rows = [r for r in report["rows"] if "command" in r]
    assert {r["engine"] for r in rows} == {"sglang", "trtllm"}
    for row in rows[:: max(1, len(rows) // 8)]:
        assert "--kernels" in row["command"]
        out = CliRunner().invoke(main, [*row["command"], "--json"])
        assert out.exit_code == 0, out.output
        op = next(o for o in json.loads(out.output)["ops"] if o["name"] in ("attention", "gemm"))
        assert op["time_s"] == pytest.approx(row["predicted_s"], rel=1e-12), row["command"]
    assert any(r["op_class"] == "gemm_fp8" for r in rows)  # TensorRT-LLM's own fp8 class, through --kernels


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--model", "llama-3.1-8b", "--kernels", "sglang"], "--kernels"),
        (["--model", "llama-3.1-8b", "--gemm", "64,64,64"], "--gemm"),
        (["--model", "llama-3.1-8b", "--prompt-write", "apart"], "--prompt-write"),
        (["--gemm", "64,64"], "--gemm '64,64'"),
        (["--gemm", "64,64,64", "--variant", "mqa"], "--gemm prices one GEMM"),
        (["--gemm-dtype", "fp8"], "--gemm-dtype applies with --gemm"),
        (["--kernels", "sglang", "--sweep", "context=512:1024:x2"], "--kernels apply to one attention layer"),
    ],
)
def test_the_layer_options_refuse_what_they_do_not_apply_to(extra, named):
    out = CliRunner().invoke(main, ["predict", "--gpu", "h100", *extra])
    assert out.exit_code != 0 and out.output.startswith("Error:") and named in out.output, out.output
    assert "Traceback" not in out.output
