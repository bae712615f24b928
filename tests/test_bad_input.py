"""Every bad input found by hand or by fuzzing gets one clear Error: line: no traceback, no hang, no
half-written file, no silent wrong answer."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main
from costmodel.core.checks import bounded_repr

DATASHEET = os.path.join(os.path.dirname(__file__), "..", "hardware_profiles", "h100_sxm.yaml")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def error_of(*args) -> str:
    result = run(*args)
    assert result.exit_code != 0, result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    return errors[0]


# --- hangs and memory ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["predict", "--gpu", "a100", "--variant", "gqa", "--heads", "1000000000000", "--groups", "7"],
            "Error: groups 7 must divide heads 1000000000000; valid group counts are 1, 2, 4, 5, 8, 10, 16, 20, 25, 32, ",
        ),
        (
            ["sweep", "--gpu", "a100", "--x", "batch", "--range", "0:64:x10", "--out", "{tmp}/s.png"],
            "Error: invalid range '0:64:x10': a geometric range needs START >= 1 and FACTOR > 1",
        ),
        (
            ["predict", "--gpu", "a100", "--sweep", "context=0:100:x2"],
            "Error: invalid range '0:100:x2': a geometric range needs START >= 1 and FACTOR > 1",
        ),
        (
            ["predict", "--gpu", "a100", "--sweep", "context=1:2:x1.0000000001"],
            "Error: range '1:2:x1.0000000001' has 69314",
        ),  # ln 2 / ln(1 + 1e-10) points
        (
            ["predict", "--gpu", "a100", "--sweep", "context=1:10000000:1", "--json"],
            "Error: range '1:10000000:1' has 10000000 points, more than the limit of 10000; use a coarser step, "
            "or raise the limit (max_points, --max-points)",
        ),
        (
            ["sweep", "--gpu", "a100", "--x", "context", "--range", "1:10000000:1", "--out", "{tmp}/s.png"],
            "Error: range '1:10000000:1' has 10000000 points, more than the limit of 10000",
        ),
        (
            ["predict", "--gpu", "a100", "--sweep", "context=1:1" + "0" * 160 + ":x10"],
            "Error: range '1:1" + "0" * 160 + ":x10' goes up to ",
        ),
        (
            ["predict", "--gpu", "a100", "--d-model", str(10**155)],
            "Error: Invalid value for '--d-model': '1" + "0" * 19 + "'... (156 characters) is not in the range "
            "1<=x<=1099511627776.",
        ),
    ],
)
def test_no_hang_no_memory_blowup(tmp_path, args, expected):
    assert error_of(*[a.replace("{tmp}", str(tmp_path)) for a in args]).startswith(expected)


# --- output paths ----------------------------------------------------------------------------------


def output_cases(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    return [
        (str(tmp_path / "missing" / "x.{ext}"), f"folder {tmp_path / 'missing'} does not exist"),
        (str(tmp_path), "is a directory"),
        ("/proc/x.{ext}", "in folder /proc"),
        (str(tmp_path / ("x" * 300 + ".{ext}")), "the file name is longer than 255 bytes"),
        ("", "an output path must not be empty"),
    ] + ([(str(locked / "x.{ext}"), "permission denied in folder")] if os.geteuid() != 0 else [])


@pytest.mark.parametrize(
    "command,ext",
    [
        (["predict", "--gpu", "a100", "--sweep", "batch=1,2", "--csv"], "csv"),
        (["roofline", "--gpu", "a100", "--out"], "svg"),
        (["sweep", "--gpu", "a100", "--x", "batch", "--range", "1,2", "--out"], "png"),
        (["reproduce", "gqa2023", "--plot"], "pdf"),
        (["calibrate", "--out"], "yaml"),
        (["validate", "--quick", "--json"], "json"),
    ],
)
def test_unwritable_outputs_are_refused_before_work(tmp_path, command, ext):
    pytest.importorskip("torch") if command[0] in ("calibrate", "validate") else None
    for path, expected in output_cases(tmp_path):
        path = path.replace("{ext}", ext)
        message = error_of(*command, path)
        assert expected in message, (path, message)
        assert message.startswith((f"Error: cannot write {path}", "Error: Invalid value for")) or not path


def test_overwrite_keeps_mode_follows_symlinks_and_refuses_read_only(tmp_path):
    target = tmp_path / "data.csv"
    target.write_text("old")
    target.chmod(0o600)
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    result = run("predict", "--gpu", "a100", "--sweep", "batch=1,2", "--csv", link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and target.read_text().startswith("batch,")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    target.chmod(0o400)
    assert error_of("predict", "--gpu", "a100", "--sweep", "batch=1,2", "--csv", target) == (
        f"Error: cannot write {target}: the file is read-only (make it writable or choose another path)"
    )
    assert target.read_text().startswith("batch,")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "link.csv"]  # no temporary file left


def test_sigterm_during_a_write_leaves_no_temporary_file(tmp_path):
    code = (
        "import time\nfrom costmodel.core.files import atomic_path\n"
        f"with atomic_path({str(tmp_path / 'out.txt')!r}) as tmp:\n"
        "    open(tmp, 'w').write('partial'); print('ready', flush=True); time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ext", ["svg", "pdf", "png"])
def test_figures_are_deterministic(tmp_path, ext):
    outputs = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.{ext}"
        assert run("roofline", "--gpu", "a100", "--out", path).exit_code == 0
        outputs.append(path.read_bytes())
    assert outputs[0] == outputs[1]


# --- profiles and configs --------------------------------------------------------------------------


def test_long_gpu_name_is_an_unknown_profile():
    assert error_of("predict", "--gpu", "x" * 300).startswith("Error: unknown hardware 'xxxxxxxx")


MALFORMED_PROFILES = {
    "binary junk": (b"\x00\xff\xfe junk \x80\x81", "is not UTF-8 text (line 1, byte 1: 0xff); save it as UTF-8"),
    "latin-1": ("name: caf\u00e9\n".encode("latin-1"), "is not UTF-8 text (line 1, byte 9: 0xe9); save it as UTF-8"),
    "utf-16": ("id: x\n".encode("utf-16"), "is not UTF-8 text (line 1, byte 0: 0xff); save it as UTF-8"),
    "deep block": (
        ("a:\n" + "".join(" " * i + "a:\n" for i in range(1, 200))).encode(),
        "nested more than 32 levels deep",
    ),
    "deep flow": (b"a: " + b"[" * 30000 + b"]" * 30000, "nested more than 32 levels deep"),
    "100 MB": (None, "is larger than 1 MiB; it is not a profile"),
}


@pytest.mark.parametrize("case", MALFORMED_PROFILES)
def test_malformed_profile_files(tmp_path, case):
    content, expected = MALFORMED_PROFILES[case]
    path = tmp_path / "p.yaml"
    if content is None:
        with open(path, "wb") as f:  # sparse: 100 MB that cost no disk
            f.truncate(100 << 20)
    else:
        path.write_bytes(content)
    message = error_of("predict", "--gpu", path)
    assert expected in message and str(path) in message


def test_infinite_capacity_is_refused(tmp_path):
    text = open(DATASHEET, encoding="utf-8").read().replace("value: 80.0e+9", "value: .inf", 1)
    assert ".inf" in text
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert error_of("predict", "--gpu", path) == (
        f"Error: {path}: field memory_capacity_bytes.value: Input should be a finite number (got inf)"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_profile(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("id: x\n")
    path.chmod(0)
    assert error_of("predict", "--gpu", path) == f"Error: cannot read profile {path}: permission denied"


LLAMA = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "vocab_size": 32000,
    "intermediate_size": 11008,
    "hidden_act": "silu",
}


@pytest.mark.parametrize(
    "change,expected",
    [
        ({"num_attention_heads": 0}, "field num_attention_heads must be an integer from 1 to 1099511627776, got 0"),
        ({"hidden_size": "4096"}, "field hidden_size must be an integer from 1 to 1099511627776, got '4096'"),
        ({"num_hidden_layers": [32]}, "field num_hidden_layers must be an integer from 1 to 1099511627776, got [32]"),
        ({"vocab_size": True}, "field vocab_size must be an integer from 1 to 1099511627776, got True"),
        ({"num_key_value_heads": 3}, "field (top level): kv_heads 3 does not divide heads 32"),
    ],
)
def test_malformed_configs(tmp_path, change, expected):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, **change}))
    message = error_of("predict", "--gpu", "a100", "--model", path)
    assert expected in message, message


def test_deeply_nested_json_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[" * 100000 + "]" * 100000)
    assert error_of("predict", "--gpu", "a100", "--model", path) == (
        f"Error: {path}: nested more than 32 levels deep; profiles and configs are flat"
    )


def test_a_model_folder_reads_its_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    result = run("predict", "--gpu", "a100", "--model", tmp_path, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["model"]["layers"] == 32


# --- silent wrong answers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["predict", "--gpu", "a100", "--model", "llama-3-8b", "--context", "0"],
            "Error: context must be an integer from 1 to 1099511627776, got 0",
        ),
        (
            ["predict", "--gpu", "a100", "--model", "llama-3-8b", "--model-config", "x.json"],
            "Error: give --model or --model-config, not both",
        ),
        (["calibrate", "--out", ""], "Error: an output path must not be empty"),
    ],
)
def test_silent_wrong_answers_are_errors(args, expected):
    if args[0] == "calibrate":
        pytest.importorskip("torch")
    assert error_of(*args) == expected


def test_json_is_always_finite():
    result = run("predict", "--gpu", "a100", "--sweep", "context=1:1099511627776:x64", "--json")
    assert result.exit_code == 0, result.output
    json.loads(result.output, parse_constant=lambda c: pytest.fail(f"non-finite {c} in JSON"))


def test_an_unexpected_exception_is_reported_as_a_bug(monkeypatch):
    import costmodel.attention.roofline

    def broken(*args, **kwargs):
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(costmodel.attention.roofline, "compare", broken)
    message = error_of("predict", "--gpu", "a100")
    assert message.startswith("Error: internal error (a bug in costmodel, please report it with the command `costmodel")
    assert message.endswith("ZeroDivisionError: planted")


def test_tilde_of_an_unknown_user_is_an_unknown_profile():
    assert error_of("predict", "--gpu", "~nobody-here{x").startswith("Error: unknown hardware")


def test_found_by_the_long_fuzz(tmp_path):
    path = str(tmp_path / "a\0b.json")
    for args in (["validate", "--json", path], ["predict", "--gpu", "a100", "--sweep", "batch=1,2", "--csv", path]):
        assert error_of(*args).endswith(f"{path!r} contains a NUL byte")
    result = run("predict", "--gpu", "a100", "--mode", "batched", "--context", "0", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["memory"]["max_batch"] == 2**40  # no cache: memory does not limit it


# --- silent nonsense that is now an error ---------------------------------------------------------


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["predict", "--gpu", "a100", "--model", ""],
            "Error: Invalid value for '--model': '' is empty; give a name or a path",
        ),
        (["predict", "--gpu", "", "--variant", "mqa"], "Error: Invalid value for '--gpu': '' is empty"),
        (["predict", "--gpu", "a100", "--sweep", "context=1:100:xinf"], "Error: invalid range '1:100:xinf'; expected"),
        (["predict", "--gpu", "a100", "--sweep", "context=1:100:xnan"], "Error: invalid range '1:100:xnan'; expected"),
        (["predict", "--gpu", "a100", "--sweep", "context=1_0:100:x2"], "Error: invalid range '1_0:100:x2'; expected"),
        (["predict", "--gpu", "a100", "--context", "１２８"], "'１２８' is not a whole number"),  # full-width digits
        (["predict", "--gpu", "a100", "--context", "١٢٨"], "'١٢٨' is not a whole number"),  # Arabic-Indic digits
        (["predict", "--gpu", "a100", "--context", "1_000"], "'1_000' is not a whole number"),
        (["predict", "--gpu", "a100", "--context", "0128"], "'0128' is not a whole number"),
        (["predict", "--gpu", "a100", "--context", "128 k"], "'128 k' is not a whole number"),
        (
            ["predict", "--gpu", "a100", "--batch", "8", "--batch", "16"],
            "Error: --batch is given twice with different values ('8' and '16'); give it once",
        ),
        (
            ["predict", "--gpu", "a100", "--dtype=bf16", "--dtype", "fp16"],
            "Error: --dtype is given twice with different values ('bf16' and 'fp16'); give it once",
        ),
        (
            [
                "capacity",
                "--gpu",
                "h100",
                "--model",
                "llama-3-8b",
                "--input-len",
                "8",
                "--output-len",
                "8",
                "--tpot-ms",
                "inf",
            ],
            "Error: Invalid value for '--tpot-ms': 'inf' is not a positive decimal number",
        ),
        (
            ["predict", "--gpu", "a100", "--sweep", "context=1,2", "--csv", "-", "--json"],
            "Error: --csv - and --format json both write standard output; give one",
        ),
    ],
)
def test_what_was_silently_taken_is_an_error(args, expected):
    assert error_of(*args).startswith(expected) or expected in error_of(*args)


def test_the_same_value_twice_is_fine_and_repeatable_options_repeat():
    assert run("predict", "--gpu", "a100", "--batch", "8", "--batch", "8", "--variant", "mqa").exit_code == 0
    result = run("predict", "--gpu", "a100", "--gpu", "h100", "--json")
    assert result.exit_code == 0 and len(json.loads(result.output)) == 2


@pytest.mark.parametrize("suffix,value", [("128", 128), ("128k", 128_000), ("128K", 131_072), ("0", 0)])
def test_whole_numbers_with_suffixes(suffix, value):
    result = run("predict", "--gpu", "a100", "--variant", "mqa", "--context", suffix, "--json")
    assert result.exit_code == 0 and json.loads(result.output)["workload"]["m"] == value


def test_dash_is_standard_output_for_every_output_option(tmp_path, monkeypatch):
    """``--csv -`` prints the rows (and no file named ``-``); ``--out -`` prints a PNG; ``--json -`` the JSON."""
    monkeypatch.chdir(tmp_path)
    csv_out = run("predict", "--gpu", "a100", "--sweep", "context=1,2", "--csv", "-")
    assert csv_out.exit_code == 0 and csv_out.output.splitlines()[0].startswith("context,variant,g,time_s")
    assert len(csv_out.output.splitlines()) == 1 + 3 * 2
    figure = CliRunner().invoke(main, ["roofline", "--gpu", "a100", "--out", "-"])
    assert figure.exit_code == 0 and figure.stdout_bytes.startswith(b"\x89PNG")
    published = run("validate", "--published", "--json", "-")
    assert published.exit_code == 0 and set(json.loads(published.output)) == {"rows", "summary"}
    assert list(tmp_path.iterdir()) == []


def test_sweep_memory_does_not_grow_with_its_points():
    """A 400k-point sweep to CSV peaks within 50 MiB of a 100k-point one (both several chunks long): records are
    evaluated and written a chunk at a time. Kept, the 300k more records would hold their 11 numbers alone in
    over 75 MiB of floats. (The 10M-point case is in benchmarks/sweep_memory.py.)"""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from sweep_memory import peak

    small, _, rows_small = peak(100_000)
    large, _, rows_large = peak(400_000)
    assert (rows_small, rows_large) == (100_000, 400_000)
    assert large - small < 50 * 2**20, (small / 2**20, large / 2**20)


@pytest.mark.parametrize(
    "args",
    [
        ("validate", "--device", "cpu", "--quick"),
        ("calibrate", "--device", "cpu", "--out", "-"),
        ("validate", "--published"),
    ],
)
def test_validation_missing_from_a_source_tree_is_one_error_line(run_cli, monkeypatch, args):
    """Run from a source tree that is only on the path, the top-level validation/ folder is not
    costmodel.validation: the commands that need it say so in one line (no traceback) and exit non-zero."""
    import sys

    monkeypatch.setitem(sys.modules, "costmodel.validation", None)
    result = run_cli(*args)
    assert result.exit_code != 0
    assert "Error: costmodel.validation is not importable here" in result.output
    assert "pip install -e ." in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("option", ["--batch", "--context"])
def test_five_thousand_digits_are_out_of_range_not_a_bug(option):
    """Python will not convert a 5,000-digit string to an integer (exit 3 before); the option is out of range, and
    the error quotes its start and length, not 5,000 characters."""
    result = CliRunner().invoke(main, ["predict", "--gpu", "a100", option, "9" * 5000])
    assert result.exit_code == 2 and "internal error" not in result.output
    assert "'99999999999999999999'... (5,000 characters) is not in the range " in result.output
    assert len(result.output) < 600


@pytest.mark.parametrize("field", ["cross_kv_heads", "encoder_kv_heads"])
def test_zero_key_value_heads_is_an_error_not_a_division(field):
    """A preset with no cross-attention key/value heads divided the heads by zero (exit 3); the schema refuses it,
    naming the field (the preset reader turns that into one Error line)."""
    from pydantic import ValidationError

    from costmodel.model.presets import ModelPreset, load_model

    data = {**load_model("t5-xxl").model_dump(), field: 0}
    with pytest.raises(ValidationError, match=f"{field}\n  Input should be greater than or equal to 1"):
        ModelPreset.model_validate(data)
    assert ModelPreset.model_validate({**data, field: 8})  # a divisor of its 64 heads is taken


def test_a_name_with_dollar_signs_draws_as_written(tmp_path):
    """A config whose name holds `$\\frac{$` stopped the page's figure with a TeX parse error (exit 3); the name is
    drawn as text."""
    import json

    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "hidden_size": 1024,
                "intermediate_size": 4096,
                "num_attention_heads": 16,
                "num_hidden_layers": 4,
                "vocab_size": 32000,
                "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0,
                "_name_or_path": "x$\\frac{$y",
            }
        )
    )
    page = tmp_path / "p.html"
    result = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", str(config), "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert "x$\\frac{$y" in page.read_text(encoding="utf-8")


def test_a_billion_laughs_profile_is_quoted_without_writing_it_out(tmp_path):
    """Nine lists of nine lists, nine deep, built from YAML aliases: 9^9 strings if written out. The error names
    the field and quotes a few items of a few levels; the quote visits at most that many items."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = tmp_path / "lol.yaml"
    path.write_text("\n".join([*lines, "id: *a8"]) + "\n")
    r = CliRunner().invoke(main, ["predict", "--gpu", str(path)])
    assert r.exit_code == 1 and "field id" in r.output and len(r.output) < 400, r.output

    class Counted:
        seen = 0

        def __repr__(self):
            Counted.seen += 1
            return "x"

    leaf = [Counted()] * 9
    for _ in range(8):
        leaf = [leaf] * 9
    assert len(bounded_repr(leaf)) < 1000 and Counted.seen <= 4**3
