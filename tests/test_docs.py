"""The README and every page of docs/ show what the tool does: each ``$ costmodel ...`` block runs and prints
what the page shows under it, each Python block runs, and each indented command runs, in page order.

The shown output is the tool's own (a page is kept honest by this test, it is not an oracle of correctness:
the numbers are checked against independent derivations elsewhere). Measuring this machine (a full
``costmodel calibrate``) is not a unit test: the default suite runs it with ``--quick``, and the
``device``-marked test runs the pages' commands exactly (``python -m pytest -m device``).
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main
from tests.conftest import QUICK_CPU_RUN

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```console\n\$ (costmodel [^\n]*)\n(.*?)```", re.S)
PYTHON = re.compile(r"```python\n(.*?)```", re.S)
INDENTED = re.compile(r"^    (costmodel .*)$", re.M)
SETUP = re.compile(r"^    (python -m pip .*)$", re.M)
#: The published tables beside the repository, as the pages name them.
SHARED = ROOT.parent / "shared" / "measurements"


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _examples() -> list[tuple[str, str, str]]:
    return [(page.name, command, shown) for page in PAGES for command, shown in BLOCK.findall(_text(page))]


def _pythons() -> list[tuple[str, str]]:
    return [(page.name, code) for page in PAGES for code in PYTHON.findall(_text(page))]


def _args(command: str) -> list[str]:
    args = shlex.split(command)[1:]
    # the pages name the published tables as they lie beside a checkout; the package ships a subset
    return [
        str(SHARED) + a[len("../shared/measurements") :] if a.startswith("../shared/measurements") else a for a in args
    ]


def test_every_page_is_linked_from_the_readme():
    readme = _text(ROOT / "README.md")
    assert [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in readme] == []


def test_the_readme_carries_exactly_two_setup_commands():
    readme = _text(ROOT / "README.md")
    setup = SETUP.findall(readme)
    assert len(setup) == 2
    assert setup[0].endswith("&& costmodel predict --gpu a100")
    assert setup[1].endswith("&& python -m pytest -q")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert setup[1] in ci.replace("install -q ", "install ")  # CI runs the README's test command (pip quietly)


@pytest.mark.parametrize("page,command,shown", _examples(), ids=[f"{p}: {c}" for p, c, _ in _examples()])
def test_shown_output_is_what_the_command_prints(page, command, shown):
    args = _args(command)
    if "--published" in args and not SHARED.is_dir():
        pytest.skip(f"{SHARED} is not beside this checkout")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    got = [line.rstrip() for line in result.output.rstrip("\n").splitlines()]
    want = [line.rstrip() for line in shown.rstrip("\n").splitlines()]
    if want and want[-1] == "...":  # the page shows the first lines only
        got, want = got[: len(want) - 1], want[:-1]
    assert got == want


@pytest.mark.parametrize("page,code", _pythons(), ids=[f"{p}: block {i}" for i, (p, _) in enumerate(_pythons())])
def test_python_blocks_run_and_print(page, code, capsys):
    exec(compile(code, f"{page} python block", "exec"), {})  # noqa: S102 - our own pages
    assert capsys.readouterr().out.strip()


def _indented() -> list[str]:
    return [command for page in PAGES for command in INDENTED.findall(_text(page))]


def _run_in_order(commands: list[str], folder: Path, ran=None) -> None:
    """Each command in ``folder``; a command ``ran`` already ran exactly (conftest.quick_cpu_run: the folder it ran
    in and each command's result, by its arguments) is not run again: its result is checked and what it wrote is
    copied in."""
    (folder / "docs").mkdir()
    done = {} if ran is None else dict(zip(QUICK_CPU_RUN, ran[1]))
    for command in commands:
        args = _args(command)
        if "--published" in args and not SHARED.is_dir():
            args = [a for a in args if a != str(SHARED)]  # the shipped subset: the same command, less data
        result = done.get(tuple(args))
        if result is None:
            result = CliRunner().invoke(main, args)
        else:
            for path in ran[0].iterdir():
                if path.is_file() and not (folder / path.name).exists():
                    shutil.copy(path, folder / path.name)
        assert result.exit_code == 0, (command, result.output)


def quick(command: str) -> str:
    """A device measurement as the default suite runs it: the same command with ``--quick``."""
    if command.startswith(("costmodel calibrate", "costmodel validate --device")) and "--quick" not in command:
        return command + " --quick"
    return command


#: Commands that take a minute or more of this machine: the ``device``-marked run runs them as shown;
#: ``validate --serving`` is checked on a small file of deployments in tests/test_served.py.
SLOW = ("costmodel validate --serving",)
#: Commands that do not end: `costmodel web` listens until stopped (tests/test_web.py serves its app and drives a
#: browser against it).
LISTENS = ("costmodel web", "costmodel serve")


def test_indented_commands_run(tmp_path, monkeypatch, quick_cpu_run):
    """In page order, in a scratch folder (a later command may read what an earlier one wrote); a
    calibration with ``--quick`` (the session's run of it where the page shows the same command); the :data:`SLOW`
    ones in the ``device``-marked run."""
    monkeypatch.chdir(tmp_path)
    commands = [c for c in _indented() if not c.startswith(SLOW + LISTENS)]
    assert len(commands) >= 6
    assert any(c.startswith("costmodel calibrate") and "--quick" not in c for c in commands)
    _run_in_order([quick(c) for c in commands], tmp_path, quick_cpu_run)


def test_quick_rewrites_only_device_measurements():
    assert (
        quick("costmodel calibrate --device cpu --out a.yaml")
        == "costmodel calibrate --device cpu --out a.yaml --quick"
    )
    assert quick("costmodel validate --device cpu --quick --json r.json").count("--quick") == 1
    assert quick("costmodel roofline --gpu a100 --out r.png") == "costmodel roofline --gpu a100 --out r.png"


@pytest.mark.device
def test_indented_commands_run_as_shown(tmp_path, monkeypatch):
    """The pages' commands exactly, the full calibration included (minutes of this machine)."""
    monkeypatch.chdir(tmp_path)
    _run_in_order([c for c in _indented() if not c.startswith(LISTENS)], tmp_path)
