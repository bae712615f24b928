"""`costmodel predict` and `costmodel hardware` through CliRunner."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from click.testing import CliRunner

from costmodel.cli.commands import main


def run(*args):
    return CliRunner().invoke(main, list(args))


def error_line(result) -> str:
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    return errors[0]


def test_group_help():
    result = run("hardware", "--help")
    assert result.exit_code == 0 and "list" in result.output and "show" in result.output


def test_default_run_compares_the_three_variants():
    result = run("predict", "--gpu", "a100")
    assert result.exit_code == 0, result.output
    for label in ("MHA (g=32)", "GQA (g=8)", "MQA (g=1)", "speed-up", "Assumptions:", "A100 80GB"):
        assert label in result.output
    assert "one decode step after 4096 cached positions: b=16, d=4096, h=32, k=v=128, bf16" in result.output


def test_json_array_and_object():
    many = json.loads(run("predict", "--gpu", "h100", "--json").output)
    assert [p["workload"]["variant"] for p in many] == ["mha", "gqa", "mqa"]
    one = json.loads(run("predict", "--gpu", "h100", "--variant", "gqa", "--groups", "4", "--json").output)
    assert one["hardware"]["id"] == "h100_sxm"
    assert {"variant", "mode", "b", "n", "m", "d", "h", "g", "k", "v", "dtype", "layers", "execution"} <= set(
        one["workload"]
    )
    assert one["workload"]["g"] == 4
    op = one["ops"][0]
    assert {"name", "einsum", "flops", "bytes", "intensity", "compute_s", "memory_s", "time_s", "bound"} <= set(op)
    assert isinstance(op["flops"], float) and isinstance(one["total"]["time_s"], float)
    assert {"kv_cache_bytes", "weight_bytes", "capacity_bytes", "fits"} <= set(one["memory"])
    assert one["total"]["time_s"] == pytest.approx(sum(o["time_s"] for o in one["ops"]))


def test_user_profile_path(tmp_path):
    data = yaml.safe_load(run("hardware", "show", "a100", "--json").output)
    data["id"], data["aliases"] = "custom", []
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run("predict", "--gpu", str(path), "--variant", "mqa")
    assert result.exit_code == 0, result.output
    assert "[custom]" in result.output


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--gpu", "a10o"], "unknown hardware 'a10o'; did you mean a10g"),
        (["--gpu", "a100", "--variant", "gqa", "--groups", "5"], "groups 5 must divide heads 32"),
        (["--gpu", "v100"], "v100_sxm2_32gb has no peak for dtype bf16; it has fp32, fp16"),
        (["--gpu", "tpu-v4", "--dtype", "fp32"], "tpu_v4 has no peak for dtype fp32; it has bf16, int8"),
        (["--gpu", "a100", "--variant", "mha", "--groups", "4"], "groups 4 is only valid with variant gqa"),
        (["--gpu", "a100", "--batch", "0"], "0 is not in the range 1<=x<=1099511627776"),
        (["--gpu", "a100", "--d-model", "100"], "d_model 100 is not divisible by heads 32"),
        (["--gpu", "a100", "--mode", "generate", "--context", "8"], "context does not apply in generate mode"),
        (["--gpu", "a100", "--sweep", "context=1:x"], "invalid range '1:x'"),
        (["--gpu", "a100", "--sweep", "banana=1:4:x2"], "invalid --sweep 'banana=1:4:x2'"),
        (["--gpu", "a100", "--csv", "x.csv"], "--csv needs --sweep"),
        (["--gpu", "a100", "--execution", "flash"], "'flash' is not one of 'unfused', 'fused'"),
    ],
)
def test_errors(args, expected):
    assert expected in error_line(run("predict", *args))


def test_malformed_profile_names_file_and_field(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump({"id": "broken", "name": "x"}))
    line = error_line(run("predict", "--gpu", str(path)))
    assert str(path) in line and "field" in line


def test_sweep_table_and_csv(tmp_path):
    out = tmp_path / "sweep.csv"
    result = run("predict", "--gpu", "h100", "--sweep", "context=128:32768:x2", "--csv", str(out))
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 3 * 9 and {r["variant"] for r in rows} == {"mha", "gqa", "mqa"}
    mha = [float(r["time_s"]) for r in rows if r["variant"] == "mha"]
    assert mha == sorted(mha)
    assert "32768" in result.output


def test_sweep_csv_into_missing_folder_writes_nothing(tmp_path):
    target = tmp_path / "missing" / "sweep.csv"
    line = error_line(run("predict", "--gpu", "h100", "--sweep", "batch=1,2", "--csv", str(target)))
    assert "does not exist" in line and not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_sweep_groups_marks_what_does_not_fit():
    # 2 layers x K and V x 64 sequences x 16385 positions x 128 x 2 bytes = 1.07 GB per kv head: 24 GB holds 22
    result = run(
        "predict",
        "--gpu",
        "l4",
        "--variant",
        "gqa",
        "--batch",
        "64",
        "--context",
        "16384",
        "--layers",
        "2",
        "--sweep",
        "groups=1,2,4,8,16,32",
        "--json",
    )
    records = json.loads(result.output)
    assert [r["g"] for r in records] == [1, 2, 4, 8, 16, 32]
    assert [r["fits"] for r in records] == [True, True, True, True, True, False]


def test_hardware_list_and_show():
    listed = run("hardware", "list")
    assert listed.exit_code == 0 and "tpu_v6e" in listed.output and "h100_sxm" in listed.output
    ids = [p["id"] for p in json.loads(run("hardware", "list", "--json").output)]
    assert len(ids) >= 21
    shown = run("hardware", "show", "H100")
    assert shown.exit_code == 0 and "datasheet" in shown.output and "ridge point" in shown.output
    assert "unknown hardware" in error_line(run("hardware", "show", "h1000"))
