"""Setting up as the README says: the package finds its profiles and presets installed as a copy (not editable)
and run from the checkout's root, where the source folder comes before the installed copy; the distribution's
name is not the import name (``costmodel`` on PyPI is another project), and no page or message tells anyone to
install ``costmodel`` from an index."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: ``pip install`` with ``costmodel`` (bare, or with extras) among its arguments: PyPI's other project.
FROM_AN_INDEX = re.compile(
    r"pip3? install\b[^\n`&;|]*?(?<![\w./@-])[\"']?costmodel(\[[\w,\s-]*\])?[\"']?(?=[\s`'\")]|$)"
)


def _texts() -> list[tuple[str, str]]:
    """Every page and every source file a user reads or sees messages from."""
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "pyproject.toml"]
    for folder in ("costmodel", "validation", "examples", "benchmarks", "docs"):
        files += sorted((ROOT / folder).glob("*.py"))
    return [(str(f.relative_to(ROOT)), f.read_text(encoding="utf-8")) for f in files]


@pytest.mark.parametrize(
    "line,bad",
    [
        ('pip install "costmodel[web]"', True),
        ("pip install costmodel", True),
        ("pip install -U 'costmodel[test]'", True),
        ("python -m pip install costmodel-llm", False),
        ('python -m pip install -e ".[web]"', False),
        ("python -m pip install . && costmodel predict --gpu a100", False),
        ("pip install ./costmodel", False),
    ],
)
def test_the_check_finds_an_install_from_an_index(line, bad):
    assert bool(FROM_AN_INDEX.search(line)) is bad


def test_no_line_installs_costmodel_from_an_index():
    found = [(name, m.group(0)) for name, text in _texts() for m in FROM_AN_INDEX.finditer(text)]
    assert found == []


def test_the_distribution_is_not_named_costmodel():
    import tomllib
    from click.testing import CliRunner

    from costmodel.cli.commands import main

    name = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
    assert name != "costmodel" and name.startswith("costmodel")
    version = CliRunner().invoke(main, ["--version"])
    assert version.exit_code == 0 and "0.1.0" in version.output


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The package built as a wheel from a copy of the checkout and installed (a copy, not editable) into a
    folder of its own: that folder."""
    import shutil

    tmp = tmp_path_factory.mktemp("install")
    source = tmp / "source"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    for name in tracked.stdout.splitlines():
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    wheels, target = tmp / "wheels", tmp / "site"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("*.whl")
    assert wheel.name.startswith("costmodel_llm-")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, capture_output=True)
    return target


def _snippet() -> str:
    """The README's Python example, as printed there."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return next(code for code in re.findall(r"```python\n(.*?)```", readme, re.S) if "import costmodel" in code)


@pytest.mark.parametrize("where", ["the checkout's root", "elsewhere"])
def test_an_installed_copy_runs_the_readme_snippet(installed, tmp_path, where):
    """Python without site's .pth files (so no editable install of this checkout is seen), the installed copy
    and the dependencies on its path: from the checkout's root the source folder shadows the copy and must find
    its data itself; elsewhere the copy must carry it."""
    import os

    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), *deps])}
    cwd = ROOT if where == "the checkout's root" else tmp_path
    code = _snippet() + "import costmodel.model_presets, costmodel.hardware_profiles\nprint(costmodel.__file__)\n"
    run = subprocess.run([sys.executable, "-S", "-c", code], cwd=cwd, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    tpot, ttft, fits, origin = run.stdout.split()
    assert float(tpot) > 0 and float(ttft) > 0 and fits == "True"
    assert Path(origin).is_relative_to(ROOT if cwd == ROOT else installed)
