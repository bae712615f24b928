"""Every ``$ costmodel ...`` command in README.md runs, and prints what the README shows under it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from costmodel.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```console\n\$ (costmodel [^\n]*)\n(.*?)```", re.S)


def examples() -> list[tuple[str, str]]:
    return BLOCK.findall(README.read_text(encoding="utf-8"))


def test_readme_has_examples():
    assert len(examples()) >= 2


@pytest.mark.parametrize("command,expected", examples(), ids=[c for c, _ in examples()])
def test_readme_example_output_is_real(command, expected):
    result = CliRunner().invoke(main, shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    got = [line.rstrip() for line in result.output.rstrip("\n").splitlines()]
    want = [line.rstrip() for line in expected.rstrip("\n").splitlines()]
    if want and want[-1] == "...":  # the README shows the first lines only
        got, want = got[: len(want) - 1], want[:-1]
    assert got == want


PYTHON = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("index", range(len(PYTHON.findall(README.read_text(encoding="utf-8")))))
def test_readme_python_runs(index, capsys):
    code = PYTHON.findall(README.read_text(encoding="utf-8"))[index]
    exec(compile(code, f"README.md python block {index}", "exec"), {})  # noqa: S102 - our own README
    assert capsys.readouterr().out.strip()


INDENTED = re.compile(r"^    (costmodel .*)$", re.M)


def test_readme_indented_commands_run(tmp_path, monkeypatch):
    """In README order, in a scratch folder (a later command may read what an earlier one wrote)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    commands = INDENTED.findall(README.read_text(encoding="utf-8"))
    assert len(commands) >= 4
    for command in commands:
        result = CliRunner().invoke(main, shlex.split(command)[1:])
        assert result.exit_code == 0, (command, result.output)
