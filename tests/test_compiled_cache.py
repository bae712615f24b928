"""Compiled programs kept on disk: a later process evaluates the same expressions without deriving them; a damaged
or unwritable cache is passed over; an empty COSTMODEL_CACHE switches it off."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from costmodel.counts import compiled as C

PROGRAMS = [
    ("gqa", "incremental", "unfused", "inplace", "absorbed", False),
    ("mha", "generate", "fused", "concat", "absorbed", False),
    ("mla", "batched", "fused", "inplace", "naive", True),
]


def _fresh(tmp_path, monkeypatch, program):
    monkeypatch.setenv("COSTMODEL_CACHE", str(tmp_path))
    C.compile_program.cache_clear()
    return C.compile_program(*program)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: f"{p[0]}-{p[1]}")
def test_a_cached_program_evaluates_as_the_derived_one(tmp_path, monkeypatch, program):
    derived = _fresh(tmp_path, monkeypatch, program)
    files = list(tmp_path.glob("program-*.json"))
    assert len(files) == 1
    C.compile_program.cache_clear()
    loaded = C._load(files[0].name.removeprefix("program-").removesuffix(".json"))
    assert loaded is not None and (loaded.names, loaded.kinds, loaded.einsums, loaded.gemms, loaded.args) == (
        derived.names,
        derived.kinds,
        derived.einsums,
        derived.gemms,
        derived.args,
    )
    dims = dict(zip(derived.args, (3, 5, 7, 64, 8, 2, 16, 16, 32, 8, 24)))
    dims["g"] = 2 if program[0] == "gqa" else dims.get("h")
    assert loaded.at(dims) == derived.at(dims)
    assert loaded.gemm_shapes(dims) == derived.gemm_shapes(dims)
    assert loaded.storage(dims) == derived.storage(dims)


def test_a_damaged_cache_file_is_derived_again(tmp_path, monkeypatch):
    derived = _fresh(tmp_path, monkeypatch, PROGRAMS[0])
    path = next(tmp_path.glob("program-*.json"))
    data = json.loads(path.read_text())
    data["compiled"]["counts"] = data["compiled"]["counts"].replace("2*", "3*", 1)  # a tampered count
    path.write_text(json.dumps(data))
    key = path.name.removeprefix("program-").removesuffix(".json")
    assert C._load(key) is None  # the checksum no longer matches
    path.write_text("{not json")
    assert C._load(key) is None
    C.compile_program.cache_clear()
    again = C.compile_program(*PROGRAMS[0])
    dims = {"b": 2, "n": 1, "m": 9, "d": 32, "h": 4, "g": 2, "k": 8, "v": 8}
    assert again.at(dims) == derived.at(dims)


def test_no_cache_when_switched_off_or_unwritable(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTMODEL_CACHE", "")
    assert C.cache_folder() is None
    C.compile_program.cache_clear()
    assert C.compile_program(*PROGRAMS[0]).names
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("COSTMODEL_CACHE", str(blocked / "cache"))
    C.compile_program.cache_clear()
    assert C.compile_program(*PROGRAMS[0]).names  # derived; nothing written, no error
    assert blocked.read_text() == "not a folder"


def test_a_cached_predict_does_not_import_sympy(tmp_path):
    """With the programs on disk, `costmodel predict --gpu a100` needs no symbolic algebra at all."""
    env = {"COSTMODEL_CACHE": str(tmp_path), "PATH": ""}
    run = [
        sys.executable,
        "-c",
        "import sys; from costmodel.cli.commands import main\n"
        "try:\n    main(['predict', '--gpu', 'a100'])\nexcept SystemExit:\n    pass\n"
        "print('sympy' in sys.modules)",
    ]
    first = subprocess.run(run, capture_output=True, text=True, env=env)
    second = subprocess.run(run, capture_output=True, text=True, env=env)
    assert first.stdout.strip().endswith("True") and second.stdout.strip().endswith("False"), (first, second)
    assert first.stdout.splitlines()[:-1] == second.stdout.splitlines()[:-1]


def test_a_cached_whole_model_does_not_import_sympy(tmp_path):
    """A model step's blocks (costmodel.counts.step_program) and its attention come from the cache: `costmodel capacity`
    on a rerun needs no symbolic algebra either."""
    env = {"COSTMODEL_CACHE": str(tmp_path), "PATH": ""}
    args = "['capacity', '--gpu', 'h100', '--model', 'mixtral-8x7b', '--input-len', '256', '--output-len', '16', '--batching', 'static']"
    run = [
        sys.executable,
        "-c",
        "import sys; from costmodel.cli.commands import main\n"
        f"try:\n    main({args})\nexcept SystemExit:\n    pass\n"
        "print('sympy' in sys.modules)",
    ]
    first = subprocess.run(run, capture_output=True, text=True, env=env)
    second = subprocess.run(run, capture_output=True, text=True, env=env)
    assert first.stdout.strip().endswith("True") and second.stdout.strip().endswith("False"), (first, second)
    assert first.stdout.splitlines()[:-1] == second.stdout.splitlines()[:-1]


@pytest.mark.parametrize(
    "block", [("moe", True), ("layer", "layernorm", 2, False), ("head", "rmsnorm")], ids=lambda b: b[0]
)
def test_a_cached_step_block_evaluates_as_the_derived_one(tmp_path, monkeypatch, block):
    """A model step's block (its grouped products included) read back from disk gives what its derivation gave."""
    monkeypatch.setenv("COSTMODEL_CACHE", str(tmp_path))
    C.compile_block.cache_clear()
    derived = C.compile_block(*block)
    files = list(tmp_path.glob("program-*.json"))
    assert len(files) == 1
    C.compile_block.cache_clear()
    loaded = C._load(files[0].name.removeprefix("program-").removesuffix(".json"))
    assert (loaded.names, loaded.kinds, loaded.gemms, loaded.grouped, loaded.args) == (
        derived.names,
        derived.kinds,
        derived.gemms,
        derived.grouped,
        derived.args,
    )
    dims = dict(zip(derived.args, (48, 64, 16, 96.0, 11.5, 32, 2, 384.0)))  # the moe block: 11.5 of 16 experts touched
    assert loaded.at(dims) == derived.at(dims) and loaded.params(dims) == derived.params(dims)
    assert loaded.gemm_shapes(dims) == derived.gemm_shapes(dims) and loaded.storage(dims) == derived.storage(dims)
    if block[0] == "moe":  # 12 GEMMs of ceil(96 / 11.5) = 9 rows
        assert [(s["batch"], s["M"]) for s in derived.gemm_shapes(dims) if s][1:] == [(12, 9), (12, 9)]
