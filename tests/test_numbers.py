"""Numbers as people read them: times in ns/µs/ms/s/min/h (never "ks", never an exponent), counts with thousands
separators or k/M/G, and every table's columns explained where it is printed. The expected strings are worked by
hand at each unit's boundary."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from costmodel.cli.commands import main
from costmodel.render.text import count, duration, si, si_range

EXPONENT = re.compile(r"\d[eE][+-]?\d")


@pytest.mark.parametrize(
    "seconds,shown",
    [
        (0, "0 s"),
        (1e-12, "0.001 ns"),
        (1e-9, "1 ns"),
        (999e-9, "999 ns"),
        (999.6e-9, "1 µs"),
        (1e-6, "1 µs"),
        (2.4e-5, "24 µs"),
        (999.4e-6, "999 µs"),
        (999.7e-6, "1 ms"),
        (0.5, "500 ms"),
        (0.9996, "1 s"),
        (1, "1 s"),
        (59.94, "59.9 s"),
        (59.96, "1 min"),
        (60, "1 min"),
        (90, "1.5 min"),
        (1330, "22.2 min"),
        (3599, "1 h"),
        (3600, "1 h"),
        (5400, "1.5 h"),
        (90_000, "25 h"),
        (3.6e6, "1,000 h"),
        (3.6e9, "1,000,000 h"),
        (-0.0021, "-2.1 ms"),
        (-90, "-1.5 min"),
    ],
)
def test_a_time_at_each_boundary(seconds, shown):
    assert duration(seconds) == shown
    assert si(seconds, "s") == shown  # every table's times go through one formatter


@pytest.mark.parametrize(
    "x,unit,shown",
    [
        (0, "", "0"),
        (17_100, "", "17.1 k"),
        (999.7e3, "", "1 M"),
        (-1500, "", "-1.5 k"),
        (1.23e9, "B", "1.23 GB"),
        (1e18, "B", "1,000 PB"),
        (0.25, "", "250 m"),
        (999, "B", "999 B"),
    ],
)
def test_a_quantity_at_each_prefix(x, unit, shown):
    assert si(x, unit) == shown


@pytest.mark.parametrize(
    "n,shown",
    [(0, "0"), (999, "999"), (1000, "1,000"), (459_056, "459,056"), (-1234, "-1,234"), (10**12, "1,000,000,000,000")],
)
def test_a_count_with_separators(n, shown):
    assert count(n) == shown


def test_a_range_shares_its_upper_ends_unit():
    assert si_range(2.46e-5, 3.28e-5, "s") == "24.6-32.8 µs"
    assert si_range(0.825e-3, 1.12e-3, "s") == "0.825-1.12 ms"
    assert si_range(800, 1330, "s") == "13.3-22.2 min"


@given(st.floats(min_value=1e-12, max_value=1e12, allow_nan=False) | st.floats(max_value=-1e-12, min_value=-1e12))
def test_no_time_prints_ks_or_an_exponent_and_each_reads_back(seconds):
    shown = duration(seconds)
    value, unit = shown.rsplit(" ", 1)
    assert unit in ("ns", "µs", "ms", "s", "min", "h") and not EXPONENT.search(shown)
    scale = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1, "min": 60, "h": 3600}[unit]
    assert float(value.replace(",", "")) * scale == pytest.approx(seconds, rel=5e-3, abs=1e-12)


@pytest.mark.parametrize(
    "args,columns",
    [
        (["hardware", "list"], ["bf16/fp16, fp8:", "on-chip:", "efficiency:"]),
        (["models", "list"], ["active:", "KV/token:", "features:"]),
        (
            [
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
                "--input-len",
                "1024",
                "--output-len",
                "128",
                "--concurrency",
                "16",
                "--num-requests",
                "48",
            ],
            ["pool:", "busy:", "tok/s/user:"],
        ),
        (["predict", "--gpu", "a100"], ["tokens/s:", "max batch:", "max m:", "bound:"]),
        (["predict", "--gpu", "a100", "--gpu", "h100"], ["tokens/s:", "bound:", "KV + weights:"]),
        (["predict", "--gpu", "h100", "--model", "llama-3-8b"], ["kernels:", "bound:"]),
        (
            ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--input-len", "2048", "--output-len", "256"],
            ["TTFT:", "tok/s/seq:", "time model:"],
        ),
        (
            [
                "predict",
                "--gpu",
                "a100",
                "--model",
                "llama-3-8b",
                "--engine",
                "vllm",
                "--concurrency",
                "512",
                "--input-len",
                "4096",
                "--output-len",
                "8192",
                "--num-requests",
                "512",
            ],
            ["TPOT:", "ITL p99:", "KV use:"],
        ),
        (
            [
                "capacity",
                "--gpu",
                "h100",
                "--model",
                "llama-3-8b",
                "--input-len",
                "2048",
                "--output-len",
                "512",
                "--tpot-ms",
                "50",
            ],
            ["clients:", "binds:"],
        ),
        (
            [
                "capacity",
                "--gpu",
                "h100",
                "--model",
                "llama-3-8b",
                "--input-len",
                "2048",
                "--output-len",
                "512",
                "--tpot-ms",
                "50",
                "--batching",
                "static",
            ],
            ["binds:", "memory batch:"],
        ),
    ],
)
def test_tables_print_no_ks_no_exponent_and_explain_their_columns(args, columns):
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    assert not re.search(r"\d ks\b", out.output) and not EXPONENT.search(out.output.split("Assumptions:")[0])
    legend = out.output.split("Columns:")[1].split("Assumptions:")[0] if columns else ""
    assert all(c in legend for c in columns), legend


def test_a_long_served_run_reads_in_minutes():
    """512 clients of 4,096 + 8,192 tokens on one A100: each request takes tens of minutes end to end."""
    out = (
        CliRunner()
        .invoke(
            main,
            [
                "predict",
                "--gpu",
                "a100",
                "--model",
                "llama-3-8b",
                "--engine",
                "vllm",
                "--concurrency",
                "512",
                "--input-len",
                "4096",
                "--output-len",
                "8192",
                "--num-requests",
                "512",
            ],
        )
        .output
    )
    row = out.splitlines()[3]
    assert " min " in row and "ks" not in row


def test_an_op_below_the_datasheet_ridge_that_binds_on_compute_is_starred():
    """The A100's MHA logits: 0.992 FLOP/B, far below the datasheet ridge (153), yet slower at the fitted GEMV rate
    than at its bandwidth: labelled compute*, and the legend names the ridge."""
    out = CliRunner().invoke(main, ["predict", "--gpu", "a100"]).output
    logits = next(line for line in out.splitlines() if line.startswith("logits"))
    assert "0.992" in logits and logits.endswith("compute*")
    assert "datasheet ridge 153 FLOP/B" in out.splitlines()[0]
    header = next(line for line in out.splitlines() if line.startswith("op "))
    end = header.index("FLOP/B") + len("FLOP/B")
    ops = [
        line
        for line in out.splitlines()
        if re.match(r"^[a-z_]+ ", line) and not line.startswith(("op ", "variant ")) and line[end - 1 : end].strip()
    ]
    assert len(ops) >= 30  # three variants' ops
    for line in ops:  # every label agrees with the datasheet ridge, or is starred
        intensity, bound = float(line[:end].split()[-1]), line.split()[-1]
        agrees = intensity >= 153 if bound.startswith("compute") else intensity <= 153
        assert bound.endswith("*") != agrees, line


def test_a_plan_without_a_ttft_target_says_so():
    out = (
        CliRunner()
        .invoke(
            main,
            [
                "plan",
                "--model",
                "llama-3-8b",
                "--gpu",
                "h100",
                "--gpus",
                "1",
                "--input-len",
                "512",
                "--output-len",
                "64",
                "--tpot-ms",
                "50",
                "--max-concurrency",
                "8",
            ],
        )
        .output
    )
    assert "best under the targets (TTFT unconstrained: no target given)" in out
