"""Files as data, whatever their encoding: a CSV with a byte-order mark or CRLF line endings reads as the same
rows, one that is not UTF-8, holds a NUL byte or names a column twice gets an `Error:` naming the file and the line,
and a config.json's flags are JSON booleans (a string "false" is not false)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.cli.commands import main
from costmodel.core.errors import CostModelError
from costmodel.core.files import read_csv

SERVING = Path(__file__).resolve().parents[2] / "shared" / "measurements" / "serving" / "silicon_sample_h100_sxm.csv"
PLAIN = "id,backend,tp\n1,vllm,2\n2,sglang,4\n\n3,trtllm\n"


def _write(tmp_path, data: bytes, name="t.csv") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_a_bom_and_crlf_read_as_the_same_rows(tmp_path):
    plain = read_csv(_write(tmp_path, PLAIN.encode()), "table")
    marked = read_csv(_write(tmp_path, b"\xef\xbb\xbf" + PLAIN.replace("\n", "\r\n").encode(), "m.csv"), "table")
    assert plain == marked
    columns, rows = plain  # as csv.DictReader gives them: the empty line skipped, a short row's field None
    assert (
        columns == ["id", "backend", "tp"]
        and len(rows) == 3
        and rows[2] == {"id": "3", "backend": "trtllm", "tp": None}
    )


@pytest.mark.parametrize(
    "data,message",
    [
        (b"id,tp\n1,2\ncaf\xe9,3\n", "is not UTF-8 text (line 3, byte 13: 0xe9)"),
        ("id,tp\n".encode("utf-16"), "is not UTF-8 text (line 1, byte 0: 0xff)"),
        (b"id,id\n1,2\n", "line 1: the column 'id' is named twice"),
        (b"id,tp\n1,2\n3,\x004\n", "line 3: a NUL byte: binary data, not a table"),
    ],
)
def test_a_file_that_is_not_a_table_names_the_file_and_line(tmp_path, data, message):
    path = _write(tmp_path, data)
    with pytest.raises(CostModelError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        read_csv(path, "deployments file")
    assert path in str(err.value)


@pytest.mark.parametrize("data", [b"\xff\xfe\x00junk\x80", b"id,id\n", b"\xef\xbb\xbfa,b\r\n\x001,2"])
def test_validate_serving_on_a_bad_file_is_an_error_line(tmp_path, data):
    """Was an internal error (exit 3, UnicodeDecodeError) on a file that is not UTF-8."""
    result = CliRunner().invoke(main, ["validate", "--serving", _write(tmp_path, data)])
    assert result.exit_code == 1 and result.output.startswith("Error: deployments file ")
    assert "Traceback" not in result.output and "internal error" not in result.output


def test_the_deployments_read_alike_with_a_bom_and_crlf(tmp_path):
    """The first 40 measured H100 deployments, as shipped and saved again with a BOM and CRLF: the same rows."""
    if not SERVING.is_file():
        pytest.skip(f"{SERVING} is not beside this checkout")
    from costmodel.validation.deployments import read

    head = "".join(SERVING.read_text(encoding="utf-8").splitlines(keepends=True)[:41])
    plain = read(_write(tmp_path, head.encode(), "plain.csv"))
    marked = read(_write(tmp_path, b"\xef\xbb\xbf" + head.replace("\n", "\r\n").encode(), "marked.csv"))
    assert plain == marked and len(plain[0]) + len(plain[1]) == 40


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_read_as_a_table_or_an_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "f.csv"
    path.write_bytes(data)
    try:
        columns, rows = read_csv(str(path), "table")
    except CostModelError as err:
        assert str(path) in str(err) and len(str(err)) < 400
    else:
        assert all(set(r) == set(columns) for r in rows)


LLAMA = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
}


@pytest.mark.parametrize(
    "key,value",
    [
        ("tie_word_embeddings", "false"),
        ("tie_word_embeddings", 0),
        ("is_encoder_decoder", 0),
        ("attention_bias", "true"),
        ("alibi", 1),
    ],
)
def test_a_flag_that_is_not_a_boolean_is_refused(tmp_path, key, value):
    """A string "false" was read as true (525M parameters of an untied head gone); 0 for is_encoder_decoder priced
    T5 as a decoder."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, key: value}))
    result = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", str(path)])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {path}: field {key} must be true or false, got {value!r}"


def test_a_boolean_flag_is_read_as_given(tmp_path):
    """The same config with tie_word_embeddings true and false: the untied one has the head's 4096 x 128256
    parameters more (525,336,576)."""
    from costmodel.model.memory import param_count
    from costmodel.model.presets import load_model

    counts = []
    for tied in (True, False):
        path = tmp_path / f"{tied}" / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps({**LLAMA, "tie_word_embeddings": tied}))
        counts.append(param_count(load_model(str(path))))
    assert counts[1] - counts[0] == 4096 * 128256


@pytest.mark.parametrize(
    "args",
    [
        ["predict", "--gpu", "h100", "--model", "llama-3-8b"],
        [
            "plan",
            "--gpu",
            "h100",
            "--model",
            "llama-3-8b",
            "--gpus",
            "1",
            "--input-len",
            "512",
            "--output-len",
            "64",
            "--max-concurrency",
            "8",
        ],
    ],
    ids=["predict", "plan"],
)
def test_the_same_command_writes_the_same_page(tmp_path, args):
    """Two runs of one command, each in its own process, write byte-identical --html pages (matplotlib named the
    SVG's clip paths from a random salt)."""
    import subprocess
    import sys

    pages = []
    for i in range(2):
        page = tmp_path / f"{i}.html"
        code = f"from costmodel.cli.commands import main; main({[*args, '--html', str(page)]!r})"
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        pages.append(page.read_bytes())
    assert pages[0] == pages[1] and b"clip-path" in pages[0]


def test_the_fitted_overheads_are_the_fit_scripts_file(tmp_path, monkeypatch):
    """costmodel/engine/overheads.yaml is as scripts/overheads_file.py writes it: writing back the values it holds
    leaves it byte for byte, and the engine reads those values (not numbers restated in code)."""
    import importlib.util
    import shutil

    import yaml

    from costmodel.engine.served import ENGINE_FRONT_END_S, OVERHEADS

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("overheads_file", root / "scripts" / "overheads_file.py")
    writer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(writer)
    copy = tmp_path / "overheads.yaml"
    shutil.copy(writer.FILE, copy)
    monkeypatch.setattr(writer, "FILE", copy)
    data = yaml.safe_load(copy.read_text(encoding="utf-8"))
    writer.write(data["engines"], data["engine_front_end_s"])
    assert copy.read_text(encoding="utf-8") == (root / "costmodel" / "engine" / "overheads.yaml").read_text(
        encoding="utf-8"
    )
    assert OVERHEADS == data["engines"] and ENGINE_FRONT_END_S == data["engine_front_end_s"]
    assert set(OVERHEADS) == {"vllm", "sglang", "trtllm"}
    assert all({"iteration_s", "request_s"} <= set(v) for v in OVERHEADS.values())
