"""The reproduction contract: every attention and GEMM row of `validate --published` names the `costmodel predict`
command that prints its predicted time exactly, on every GPU profile, whichever way the timed engine version writes
the prompt's cache (inside the prompt call: vLLM 0.14's tables; apart: vLLM 0.19's)."""

from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main
from costmodel.hardware.catalog import load_profile, profile_ids
from costmodel.validation.published import read_folder, shipped_folder
from costmodel.validation.published_report import validate_published

#: The shipped tables of both conventions: (system, engine version).
TABLES = (("a100_sxm", "vllm_0.14.0"), ("h100_sxm", "vllm_0.19.0"))
GPUS = [i for i in profile_ids() if load_profile(i).kind == "gpu" and "bf16" in load_profile(i).peak_flops_per_s]


def _subset(tmp_path, gpu: str):
    """A few prompt and decode rows of each shipped table, as a table of ``gpu``'s (its profile id as the system)."""
    for system, version in TABLES:
        for table, rows in (
            ("context_attention", (5, 400, 2000, 7000)),
            ("generation_attention", (9, 3000)),
            ("gemm", (3, 900, 5000)),
        ):
            src = shipped_folder() / "aiconfigurator" / f"{system}_{version}_{table}.csv"
            with open(src, newline="") as f:
                read = list(csv.DictReader(f))
            with open(tmp_path / f"{gpu}_{version}_{table}.csv", "w", newline="") as f:
                out = csv.DictWriter(f, fieldnames=read[0].keys())
                out.writeheader()
                out.writerows(read[i % len(read)] for i in rows)


@pytest.mark.parametrize("gpu", GPUS)
def test_every_attention_row_is_reproduced_by_its_command(tmp_path, gpu):
    _subset(tmp_path, gpu)
    tables, _ = read_folder(tmp_path)
    rows = validate_published(tables)["rows"]
    assert all("command" in r for r in rows)

    assert {r["op_class"] for r in rows} >= {"gemm", "decode_attention", "prefill_attention"}
    # a row timed faster than this device's dense peak allows is rejected first; prompts of both versions remain
    prompts = {r["engine_version"] for r in rows if r["op_class"] == "prefill_attention" and r["isl"] > 1}
    assert prompts == {"0.14.0", "0.19.0"}
    for row in rows:
        out = CliRunner().invoke(main, [*row["command"], "--json"])
        assert out.exit_code == 0, out.output
        op = next(o for o in json.loads(out.output)["ops"] if o["name"] in ("attention", "gemm"))
        assert op["time_s"] == pytest.approx(row["predicted_s"], rel=1e-12), (row["command"], row["engine_version"])
    assert {r["engine"] for r in rows} == {"vllm"}
