"""The shape of the package: a public API, imports that flow one way, and torch only in validation."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main

ROOT = Path(__file__).resolve().parents[1]
#: module name -> its source file, with validation/ as costmodel.validation (as it installs)
MODULES = {
    "costmodel." + ".".join(p.relative_to(ROOT / "costmodel").with_suffix("").parts).removesuffix(".__init__"): p
    for p in (ROOT / "costmodel").rglob("*.py")
    if "__pycache__" not in p.parts
}
MODULES |= {f"costmodel.validation.{p.stem}": p for p in (ROOT / "validation").glob("*.py") if p.stem != "__init__"}
MODULES |= {
    "costmodel": ROOT / "costmodel" / "__init__.py",
    "costmodel.validation": ROOT / "validation" / "__init__.py",
}
MODULES.pop("costmodel.__init__", None)


def top_level_imports(path: Path) -> set[str]:
    """Modules imported when ``path`` is imported (not those imported inside functions)."""
    out = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES}
    return out


def every_import(path: Path) -> set[str]:
    """Every module ``path`` imports anywhere, functions included."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES}
    return out


def test_the_module_table_covers_the_package():
    assert {
        "costmodel.cli.commands",
        "costmodel.core.vocab",
        "costmodel.counts.program",
        "costmodel.validation.kernels",
    } <= set(MODULES)


def test_no_import_cycle(imports=every_import):
    """No circle, imports inside functions included (a lazy import is still a dependency)."""
    graph = {
        name: {m for m in imports(path) if m in MODULES and m != name and m != "costmodel"}
        for name, path in MODULES.items()
    }
    state: dict[str, int] = {}

    def visit(node, trail):
        if state.get(node) == 1:
            raise AssertionError("import cycle: " + " -> ".join([*trail[trail.index(node) :], node]))
        if state.get(node) == 2:
            return
        state[node] = 1
        for nxt in sorted(graph[node]):
            visit(nxt, [*trail, node])
        state[node] = 2

    for name in sorted(graph):
        visit(name, [])


#: The floors, bottom up, and what each may import besides itself. The direction of imports is the direction of the
#: data: counts and devices feed a price, a price feeds attention and models, a model's step feeds an engine's
#: iterations, engines feed deployments. Renderers take reports and the core only, so every floor may print through
#: them; nothing imports the command line.
FLOORS = {
    "core": set(),
    "render": {"core"},
    "counts": {"core", "render"},
    "hardware": {"core", "render"},
    "price": {"core", "render", "hardware"},
    "attention": {"core", "render", "hardware", "price", "counts"},
    "model": {"core", "render", "hardware", "price", "counts", "attention"},
    "engine": {"core", "render", "hardware", "price", "counts", "attention", "model"},
    "deploy": {"core", "render", "hardware", "price", "counts", "attention", "model", "engine"},
    "papers": {"core", "render", "hardware", "price", "counts", "attention", "model", "engine", "deploy"},
    "web": {"core", "render", "hardware", "counts", "attention", "model", "engine", "deploy"},
    "validation": {"core", "render", "hardware", "price", "counts", "attention", "model", "engine", "deploy"},
    "cli": {
        "core",
        "render",
        "hardware",
        "price",
        "counts",
        "attention",
        "model",
        "engine",
        "deploy",
        "papers",
        "web",
        "validation",
    },
}


def _floor(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "costmodel" else None


def runtime_imports(path: Path) -> set[str]:
    """Every costmodel module ``path`` imports, functions included, leaving out ``if TYPE_CHECKING:`` blocks (names
    for annotations, not dependencies); ``from costmodel.x import y`` counts ``costmodel.x.y`` where that is a
    module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)
        for child in node.body
        for n in ast.walk(child)
    }
    out = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES}
    return {m for m in out if m.startswith("costmodel.")}


def floor_violations(modules: dict[str, Path]) -> list[str]:
    """Each import that breaks :data:`FLOORS`, as ``importer -> imported``."""
    bad = []
    for name, path in sorted(modules.items()):
        here = _floor(name)
        if here is None:
            continue
        for target in sorted(runtime_imports(path)):
            there = _floor(target)
            if there is not None and there != here and there not in FLOORS[here]:
                bad.append(f"{name} -> {target}")
    return bad


def test_every_module_stands_on_a_floor():
    floors = {_floor(name) for name in MODULES} - {None}
    assert floors == set(FLOORS)


def test_imports_follow_the_floors():
    assert floor_violations(MODULES) == []


def test_an_upward_import_is_found(tmp_path, monkeypatch):
    """The floor check can fail: a price module that imports the engine is reported, and one that imports it only
    for an annotation is not."""
    upward, annotated = tmp_path / "up.py", tmp_path / "typed.py"
    upward.write_text("def f():\n    from costmodel.engine.served import serve\n")
    annotated.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from costmodel.engine.served import X\n"
    )
    monkeypatch.setitem(MODULES, "costmodel.price.up", upward)
    monkeypatch.setitem(MODULES, "costmodel.price.typed", annotated)
    assert floor_violations(MODULES) == ["costmodel.price.up -> costmodel.engine.served"]


def test_no_module_imports_another_modules_private_name():
    bad = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("costmodel"):
                bad += [
                    f"{name}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert bad == []


def test_a_planted_cycle_is_found(tmp_path, monkeypatch):
    """The cycle check can fail: two modules importing each other, one of them inside a function, are reported."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from costmodel.b import x\n")
    b.write_text("def f():\n    from costmodel.a import y\n")
    monkeypatch.setitem(MODULES, "costmodel.a", a)
    monkeypatch.setitem(MODULES, "costmodel.b", b)
    with pytest.raises(AssertionError, match="import cycle"):
        test_no_import_cycle()


def test_torch_is_imported_only_under_validation():
    for name, path in MODULES.items():
        uses_torch = any(m == "torch" or m.startswith("torch.") for m in every_import(path))
        assert not uses_torch or name.startswith("costmodel.validation"), name


#: Modules that spell the serving engines' own flags (a launch command is the engine's command line, not ours).
ENGINE_COMMAND_LINES = {"costmodel.deploy.launch"}


def test_no_module_below_the_cli_knows_its_flags():
    """Only the command-line modules spell options as --flags in their code (help texts and errors)."""
    for name, path in MODULES.items():
        if name.startswith("costmodel.cli.") or name.startswith("costmodel.validation") or name in ENGINE_COMMAND_LINES:
            continue
        strings = [
            n.value
            for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        ]
        flags = [
            s
            for s in strings
            if any(
                f"--{flag}" in s
                for flag in ("batch", "context", "groups", "d-model", "head-dim", "tp", "variant", "gpu")
            )
        ]
        assert not flags, (name, flags)


@pytest.mark.parametrize(
    "args,absent",
    [
        (["--help"], ("sympy", "numpy", "pydantic", "torch", "matplotlib")),
        (["predict", "--gpu", "a100"], ("torch", "matplotlib")),
    ],
)
def test_commands_load_only_what_they_need(args, absent):
    code = (
        "import sys; from costmodel.cli.commands import main\n"
        f"try:\n    main({args!r}, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {absent!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_import_costmodel_is_lazy_and_exports_the_api():
    code = (
        "import sys, costmodel\n"
        "loaded = 'sympy' in sys.modules or 'numpy' in sys.modules\n"
        "names = ['derive', 'Workload', 'predict', 'sweep', 'load_profile', 'load_model', 'predict_model',\n"
        "         'CostModelError']\n"
        "print(loaded, all(callable(getattr(costmodel, n)) for n in names))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


def test_three_lines_of_python_equal_the_cli_json():
    """The README's whole-model example, defaults included, gives what `costmodel predict --json` gives."""
    code = (
        "import json, costmodel\n"
        "p = costmodel.predict_model(costmodel.load_model('llama-3-8b'), costmodel.load_profile('h100'))\n"
        "print(json.dumps(p.model_dump(mode='json'), indent=2))"
    )
    python = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    cli = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(python) == json.loads(cli.output)
    assert json.loads(python)["workload"] == {
        "batch": 16,
        "context": 4096,
        "source": None,
        "dtype": "bf16",
        "weight_dtype": "bf16",
        "weight_group_size": 0,
        "kv_dtype": "bf16",
        "execution": "fused",
        "tp": 1,
        "overlap": "max",
        "attention_dp": 1,
        "weight_scope": "all",
    }


def test_attention_defaults_agree_between_python_and_cli():
    import costmodel

    python = costmodel.compare(costmodel.workloads(), costmodel.load_profile("a100")).model_dump(mode="json")
    cli = CliRunner().invoke(main, ["predict", "--gpu", "a100", "--json"])
    assert json.loads(cli.output) == python


def test_help_shows_the_defaults():
    out = " ".join(CliRunner().invoke(main, ["predict", "--help"]).output.split())
    assert "batch size b [default: 16]" in out
    assert "[default: unfused; fused with --model]" in out


def test_reports_share_one_convention():
    import costmodel

    hw = costmodel.load_profile("h100")
    reports = [
        costmodel.derive("gqa", "incremental", groups=8),
        costmodel.predict(costmodel.Workload.create("gqa"), hw),
        costmodel.compare(costmodel.workloads(), hw),
        costmodel.sweep(costmodel.Workload.create("mqa"), hw, "context", "128:1024:x2"),
        costmodel.predict_model(costmodel.load_model("llama-2-7b"), hw),
    ]
    for r in reports:
        text, data = str(r), r.model_dump()
        assert "\n" in text and not text.startswith("<"), type(r)
        json.dumps(data)  # JSON-ready
    with pytest.raises(Exception):  # frozen
        reports[-1].memory = None


def test_public_names_are_not_shadowed_by_submodules():
    """A submodule named like an API function would replace it on the package once imported."""
    import costmodel

    clashes = [name for name in costmodel.__all__ if (ROOT / "costmodel" / f"{name}.py").exists()]
    assert clashes == []


def _commands(group: click.Group, path=()):
    """Every command and group of the CLI, as the argument path that reaches it."""
    yield path
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name)


COMMANDS = list(_commands(main))


def test_the_command_walk_finds_every_command():
    assert {("predict",), ("derive",), ("hardware", "list"), ("reproduce", "gqa2023"), ("validate",)} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) or "costmodel" for p in COMMANDS])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_help_with_an_example(path, flag):
    """``-h`` and ``--help`` of every command print its usage; a command's (not a group's) help ends with an
    example that names the command."""
    result = CliRunner().invoke(main, [*path, flag])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: main {' '.join(path)}".rstrip() + " ")
    command = main
    for name in path:
        command = command.commands[name]
    if not isinstance(command, click.Group):
        example = [line.strip() for line in result.output.splitlines() if line.strip().startswith("Example:")]
        assert example and example[0].startswith(f"Example: costmodel {' '.join(path)}"), result.output


def _parts(report):
    """Every pydantic model inside a report, the report included."""
    from pydantic import BaseModel

    yield report
    for value in (
        report.root if hasattr(report, "root") else [getattr(report, name) for name in type(report).model_fields]
    ):
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, BaseModel):
                yield from _parts(item)


def test_reports_and_their_parts_are_frozen():
    """``p.total.time_s = 0`` and the like are refused at every level of every report."""
    from pydantic import ValidationError

    import costmodel

    h100, llama = costmodel.load_profile("h100"), costmodel.load_model("llama-3-8b")
    w = costmodel.Workload.create("gqa", batch=2, context=64)
    reports = [
        costmodel.predict(w, h100),
        costmodel.compare([w], h100),
        costmodel.sweep([w], h100, "context", [64]),
        costmodel.predict_model(llama, h100, batch=2, context=64),
        costmodel.request(llama, h100, input_len=16, output_len=4),
        costmodel.capacity(llama, [h100], input_len=16, output_len=4, variants=False),
    ]
    seen = 0
    for report in reports:
        for part in _parts(report):
            fields = list(type(part).model_fields)
            if not fields:
                continue
            with pytest.raises(ValidationError, match="frozen"):
                setattr(part, fields[0], getattr(part, fields[0]))
            seen += 1
    assert seen > 20


def test_the_device_reaches_every_report_in_one_shape():
    """Attention predictions, sweeps, whole models and requests all state their device as a DeviceSummary; a
    datasheet-only device (TPU v5e) has no efficiency, and the tables say 'datasheet roofline'."""
    import costmodel
    from costmodel.core.reports import DeviceSummary

    tpu, llama = costmodel.load_profile("tpu-v5e"), costmodel.load_model("llama-2-7b")
    w = costmodel.Workload.create("gqa", batch=2, context=64)
    reports = [
        costmodel.predict(w, tpu),
        costmodel.sweep([w], tpu, "context", [64]),
        costmodel.predict_model(llama, tpu, batch=2, context=64, tp=4),
        costmodel.request(llama, tpu, input_len=16, output_len=4),
    ]
    assert all(type(r.hardware) is DeviceSummary and r.hardware.efficiency is None for r in reports)
    assert reports[2].hardware.devices == 4 and reports[0].hardware.devices == 1
    assert "datasheet roofline" in str(reports[3])


@pytest.mark.parametrize("name", ["predict", "capacity"])
def test_help_groups_every_option_in_a_named_panel(name):
    """predict's 74 options and capacity's 27 are listed by what they ask: every option in a named panel (none
    left over), each once, the panels in their order."""
    command = main.commands[name]
    ctx = click.Context(command, info_name=name)
    assert {p.name for p in command.params} <= set(command.panels)
    out = CliRunner().invoke(main, [name, "--help"]).output
    titles = [line[:-1] for line in out.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert titles == list(dict.fromkeys(command.panels.values())) and "Other options" not in out
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)[0]
        listed = [line for line in out.splitlines() if re.match(re.escape(record) + r"(\s|$)", line.strip())]
        assert len(listed) == 1, record


#: The size a newcomer reads in one sitting: a module of the package, a function (lines, docstrings included).
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 450, 80


def test_no_module_or_function_past_its_size():
    """Every module of the package (validation/ too: it installs as costmodel.validation) within MAX_MODULE_LINES
    and every function within MAX_FUNCTION_LINES: a long one is split where its steps are, not grown."""
    long_modules, long_functions = [], []
    for name, path in MODULES.items():
        if not name.startswith("costmodel."):
            continue
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}.{node.name}: {size} lines")
    assert not long_modules and not long_functions, long_modules + long_functions
