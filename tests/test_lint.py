"""The repository as ruff reads it (configured in pyproject.toml): no lint finding, and every file as the formatter
writes it. A file that breaks either fails here, so CI runs both with the suite."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    ruff = shutil.which("ruff")
    assert ruff is not None, "ruff is in the test extra: python -m pip install -e '.[test]'"
    return subprocess.run([ruff, *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_finds_nothing():
    result = _ruff("check", ".")
    assert result.returncode == 0, result.stdout


def test_every_file_is_formatted():
    result = _ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("code,rule", [("import os\n", "F401"), ("x = 1\nif x == None:\n    pass\n", "E711")])
def test_the_check_can_fail(tmp_path, code, rule):
    """A planted unused import and a comparison to None are found (the configuration reads this repository's)."""
    planted = tmp_path / "planted.py"
    planted.write_text(code)
    result = _ruff("check", "--config", str(ROOT / "pyproject.toml"), str(planted))
    assert result.returncode == 1 and rule in result.stdout
