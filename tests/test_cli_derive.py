"""`costmodel derive` through click's CliRunner: output, JSON round trip and the error lines."""

from __future__ import annotations

import json

import pytest
import sympy
from click.testing import CliRunner

from costmodel import derive
from costmodel.cli.commands import main
from costmodel.counts import symbols as S


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_json_round_trips_to_the_api():
    result = run("derive", "--variant", "gqa", "--mode", "generate", "--asymptotic", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    api = derive("gqa", "generate")
    assert (out["variant"], out["mode"]) == ("gqa", "generate")
    assert [op["name"] for op in out["ops"]] == [op.name for op in api.ops]
    for op, ref in zip(out["ops"], api.ops):
        assert sympy.sympify(op["flops"], locals=S.SYMBOLS) == ref.flops
        assert sympy.sympify(op["memory_elements"], locals=S.SYMBOLS) == ref.memory_elements
        assert op["einsum"] == ref.einsum
    assert sympy.simplify(sympy.sympify(out["total"]["ratio"], locals=S.SYMBOLS) - api.ratio) == 0
    got = sympy.sympify(out["asymptotic_ratio"], locals=S.SYMBOLS)
    assert sympy.simplify(got - (1 / S.d + S.g * S.n / (S.d * S.h) + S.h * S.n / S.d**2 + 1 / S.b)) == 0
    assert any("n <= d" in a for a in out["assumptions"])
    # plain sympify (no locals) parses too
    sympy.sympify(out["total"]["flops"])


def test_table_shows_paper_form_and_extra_assumption():
    result = run("derive", "--variant", "mqa", "--mode", "generate", "--asymptotic")
    assert result.exit_code == 0
    assert "Θ(1/d + n/(d*h) + 1/b)" in result.output
    assert "h/g <= k" in result.output
    assert "bd,gdk->bgk" in result.output


def test_numeric_dims_and_latex():
    result = run("derive", "--variant", "gqa", "--groups", "8", "--heads", "32", "--d-model", "4096", "--latex")
    assert result.exit_code == 0, result.output
    assert r"\begin{tabular}" in result.output and r"\texttt{bd,gdk->bgk}" in result.output
    # k_proj by hand: FLOPs 2*b*d*g*k = 2*4096*8*128 b; memory b*d + b*g*k + d*g*k = 5120 b + 4096*1024
    k_proj = next(line for line in result.output.splitlines() if line.startswith(r"k\_proj"))
    assert "$8388608 b$" in k_proj and r"$1024 \left(5 b + 4096\right)$" in k_proj


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--variant", "gqa", "--groups", "3", "--heads", "8"], "groups 3 must divide heads 8"),
        (["--batch", "0"], "0 is not in the range 1<=x<=1099511627776"),
        (["--heads", "-2"], "'-2' is not a whole number: ASCII digits without a leading zero"),
        (["--variant", "xqa"], "'xqa' is not one of 'mha', 'mqa', 'gqa'"),
        (["--mode", "decode"], "'decode' is not one of"),
        (["--variant", "mha", "--groups", "2"], "groups 2 is only valid with variant gqa"),
        (["--mode", "generate", "--context", "5"], "context m does not apply in generate mode"),
        (["--d-model", "100", "--heads", "3"], "d_model 100 is not divisible by heads 3"),
    ],
)
def test_bad_input_gives_one_error_line(args, expected):
    result = run("derive", *args)
    assert result.exit_code != 0
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and expected in errors[0], result.output
    assert "Traceback" not in result.output
