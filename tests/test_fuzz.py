"""A hypothesis fuzz of the whole CLI, in-process: 300 generated command lines per run (fixed seed),
valid and invalid values and malformed files mixed; each must exit 0 (with finite JSON) or give one
Error: line, without a traceback (how long each took is the benchmark's to print). ``benchmarks/fuzz_cli.py`` runs a longer one."""

from __future__ import annotations

from hypothesis import HealthCheck, given, seed, settings

from tests.fuzzing import check, command_lines


@seed(20261121)
@settings(
    max_examples=300,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(command_lines())
def test_every_command_line_ends_cleanly(args):
    problem = check(args)
    assert problem is None, (args, problem)


def test_the_check_catches_a_planted_bug(monkeypatch):
    """The fuzz's check fails on a traceback, on two error lines, and on a reported internal error."""
    import costmodel.attention.roofline

    def broken(*args, **kwargs):
        raise KeyError("planted")

    monkeypatch.setattr(costmodel.attention.roofline, "compare", broken)
    assert "internal error" in check(["predict", "--gpu", "a100"])
    monkeypatch.setattr(
        costmodel.attention.roofline, "compare", lambda *a, **k: print("Error: one\nError: two") or 1 / 0
    )
    assert check(["predict", "--gpu", "a100"]) is not None
