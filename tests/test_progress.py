"""Progress bars: on a terminal's standard error only, never in what a command prints, and never with --quiet."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main
from costmodel.core import progress

SHARED = Path(__file__).resolve().parents[2] / "shared" / "measurements"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_on_a_terminal_and_none_on_a_pipe(monkeypatch):
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    monkeypatch.setattr(progress, "QUIET", False)
    monkeypatch.delenv("COSTMODEL_QUIET", raising=False)
    with progress.bar(10, "loads") as advance:
        for _ in range(10):
            advance()
    assert "loads" in tty.getvalue() and "/10" in tty.getvalue()  # drawn (tqdm redraws at most every 0.1 s)
    pipe = io.StringIO()  # a pipe or a file: isatty() is False
    monkeypatch.setattr("sys.stderr", pipe)
    with progress.bar(10, "loads") as advance:
        advance(10)
    assert pipe.getvalue() == ""


def test_quiet_silences_the_bar(monkeypatch):
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    monkeypatch.setattr(progress, "QUIET", True)
    with progress.bar(5, "loads") as advance:
        advance(5)
    assert tty.getvalue() == ""
    monkeypatch.setattr(progress, "QUIET", False)
    monkeypatch.setenv("COSTMODEL_QUIET", "1")
    with progress.bar(5, "loads") as advance:
        advance(5)
    assert tty.getvalue() == ""


def test_quiet_is_a_global_option_and_leaves_the_output_alone():
    args = [
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3-8b",
        "--engine",
        "vllm",
        "--concurrency",
        "1,2",
        "--input-len",
        "256",
        "--output-len",
        "16",
        "--json",
    ]
    plain = CliRunner().invoke(main, args)
    quiet = CliRunner().invoke(main, ["--quiet", *args])
    assert plain.exit_code == quiet.exit_code == 0
    assert plain.output == quiet.output and plain.output.lstrip().startswith("{")
    progress.QUIET = False


LONG = {
    "a load curve": (
        ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--engine", "vllm", "--concurrency", "1,2"]
        + ["--input-len", "256", "--output-len", "16"],
        "loads",
    ),
    "recommend": (
        ["recommend", "--gpu", "h100", "--model", "llama-3-8b", "--input-len", "256", "--output-len", "16"]
        + ["--request-rate", "2", "--tpot-ms", "50", "--max-gpus", "2"],
        "layouts",
    ),
    "plan": (
        ["plan", "--gpu", "h100", "--gpus", "1", "--model", "llama-3-8b", "--input-len", "256"]
        + ["--output-len", "16", "--max-concurrency", "2"],
        "layouts",
    ),
    "validate --published": (["validate", "--published"], "published tables"),
}


@pytest.mark.parametrize("name", sorted(LONG))
def test_every_long_command_draws_a_bar_on_a_terminal(name, monkeypatch, tmp_path):
    """On a terminal (standard error one), each command that can run past two seconds draws its bar there, and
    what it prints on standard output is the same as on a pipe."""
    args, label = LONG[name]
    if name == "validate --published" and not SHARED.is_dir():
        pytest.skip(f"{SHARED} is not beside this checkout")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COSTMODEL_QUIET", raising=False)
    monkeypatch.setattr(progress, "QUIET", False)
    piped = CliRunner().invoke(main, args)
    monkeypatch.setattr(progress, "shown", lambda: True)
    drawn = CliRunner().invoke(main, args)
    assert piped.exit_code == drawn.exit_code == 0, piped.output + drawn.output
    assert label in drawn.stderr and label not in piped.stderr
    assert drawn.stdout == piped.stdout
