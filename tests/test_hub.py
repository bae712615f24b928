"""Any Hugging Face model by its id: its config.json from a local Hugging Face cache (as huggingface_hub lays it
out), never the network in tests (conftest turns the Hub off)."""

from __future__ import annotations

import json
import shlex

import pytest
from click.testing import CliRunner

import costmodel
from costmodel.cli.commands import main
from costmodel.core.errors import CostModelError
from costmodel.deploy.launch import parse

#: A small Llama-style config.json (the keys transformers' LlamaConfig writes).
TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "num_hidden_layers": 22,
    "vocab_size": 32000,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def cache(root, repo: str, config: dict | str, commit: str = "0123abcd", ref: str | None = "main"):
    """A Hugging Face cache under ``root`` holding ``repo``'s config.json at ``commit`` (``ref`` pointing at it)."""
    folder = root / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if ref is not None:
        (folder / "refs").mkdir()
        (folder / "refs" / ref).write_text(commit)
    return root


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """HF_HOME at a cache holding acme/tiny-llama; the Hub offline."""
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cache(tmp_path / "hub", "acme/tiny-llama", TINY)
    return tmp_path / "hub"


def test_a_cached_hub_model_is_read_like_its_config_file(hub, tmp_path):
    m = costmodel.load_model("acme/tiny-llama")
    local = tmp_path / "local" / "config.json"
    local.parent.mkdir()
    local.write_text(json.dumps(TINY))
    same = costmodel.load_model(str(local))
    assert (m.d_model, m.heads, m.kv_heads, m.layers, m.d_ff, m.vocab) == (2048, 32, 4, 22, 5632, 32000)
    named = {"id", "name", "source", "aliases"}
    assert m.model_dump(exclude=named) == same.model_dump(exclude=named)
    assert m.aliases == ("acme/tiny-llama",)  # the name an engine loads it by (costmodel.deploy.launch.hub_id)
    assert "acme/tiny-llama@main" in m.source and "0123abcd" in m.source


@pytest.mark.parametrize(
    "args",
    [
        ["predict", "--gpu", "h100", "--model", "acme/tiny-llama", "--json"],
        [
            "predict",
            "--gpu",
            "h100",
            "--model",
            "acme/tiny-llama",
            "--input-len",
            "512",
            "--output-len",
            "64",
            "--json",
        ],
        [
            "predict",
            "--gpu",
            "h100",
            "--model",
            "acme/tiny-llama",
            "--engine",
            "vllm",
            "--concurrency",
            "4",
            "--input-len",
            "512",
            "--output-len",
            "64",
            "--json",
        ],
        [
            "capacity",
            "--gpu",
            "h100",
            "--model",
            "acme/tiny-llama",
            "--tpot-ms",
            "50",
            "--input-len",
            "512",
            "--output-len",
            "64",
            "--json",
        ],
        [
            "plan",
            "--gpu",
            "h100",
            "--gpus",
            "2",
            "--model",
            "acme/tiny-llama",
            "--input-len",
            "512",
            "--output-len",
            "64",
            "--max-concurrency",
            "8",
            "--json",
        ],
        [
            "sweep",
            "--gpu",
            "h100",
            "--model",
            "acme/tiny-llama",
            "--x",
            "batch",
            "--range",
            "1:4:x2",
            "--context",
            "1024",
        ],
    ],
    ids=["step", "request", "served", "capacity", "plan", "sweep"],
)
def test_every_command_takes_a_cached_hub_id(hub, tmp_path, args, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if args[0] == "sweep":
        args = [*args, "--out", str(tmp_path / "s.svg")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output


def test_a_revision_and_a_ref(hub):
    cache(hub.parent / "hub", "acme/other", {**TINY, "num_hidden_layers": 4}, commit="feedbeef", ref="v1")
    assert costmodel.load_model("acme/other@v1").layers == 4
    assert costmodel.load_model("acme/other@feedbeef").layers == 4


REVISED = {
    "predict": ["predict", "--gpu", "h100", "--json"],
    "plan": ["plan", "--gpu", "h100", "--gpus", "1", "--input-len", "64", "--output-len", "8"]
    + ["--max-concurrency", "4", "--json"],
}


@pytest.mark.parametrize("command", sorted(REVISED))
def test_revision_reads_the_config_at_that_ref_either_side_of_model(hub, command):
    """--revision v1 reads the snapshot refs/v1 points at (4 layers), not main's (22), whichever of --model and
    --revision comes first: the same answer as ORG/NAME@v1."""
    cache(hub, "acme/other", {**TINY, "num_hidden_layers": 4}, commit="feedbeef", ref="v1")
    main_snapshot = hub / "models--acme--other" / "snapshots" / "0123abcd"
    main_snapshot.mkdir()
    (main_snapshot / "config.json").write_text(json.dumps(TINY))
    (hub / "models--acme--other" / "refs" / "main").write_text("0123abcd")
    runner = CliRunner()
    plain = runner.invoke(main, [*REVISED[command], "--model", "acme/other"])
    pinned = runner.invoke(main, [*REVISED[command], "--model", "acme/other@v1"])
    assert plain.exit_code == pinned.exit_code == 0, plain.output + pinned.output
    assert plain.output != pinned.output
    if command == "predict":
        assert json.loads(plain.output)["model"]["layers"] == 22
        assert json.loads(pinned.output)["model"]["layers"] == 4
    for order in (["--model", "acme/other", "--revision", "v1"], ["--revision", "v1", "--model", "acme/other"]):
        r = runner.invoke(main, [*REVISED[command], *order])
        assert r.exit_code == 0, r.output
        assert r.output == pinned.output


def test_a_revision_rides_into_launch_commands_and_recommend(hub):
    """vLLM and SGLang are launched with --revision (read back as ORG/NAME@REVISION); trtllm-serve has no such
    flag: one Error line saying to pass the downloaded folder. recommend's command names the revision too."""
    cache(hub, "acme/other", {**TINY, "num_hidden_layers": 4}, commit="feedbeef", ref="v1")
    served = ["predict", "--gpu", "h100", "--model", "acme/other", "--revision", "v1", "--concurrency", "1"]
    served += ["--input-len", "64", "--output-len", "8", "--launch", "--json"]
    for name in ("vllm", "sglang"):
        r = CliRunner().invoke(main, [*served, "--engine", name])
        assert r.exit_code == 0, r.output
        argv = shlex.split(json.loads(r.output)["launch"])
        assert argv[argv.index("--revision") + 1] == "v1"
        assert parse(argv)[1] == "acme/other@v1"
    r = CliRunner().invoke(main, [*served, "--engine", "trtllm"])
    assert r.exit_code == 1 and "trtllm-serve takes no --revision" in r.output and "Traceback" not in r.output
    args = ["recommend", "--gpu", "h100", "--model", "acme/other@v1", "--input-len", "64", "--output-len", "8"]
    r = CliRunner().invoke(main, [*args, "--request-rate", "1", "--tpot-ms", "50", "--json"])
    assert r.exit_code == 0, r.output
    command = json.loads(r.output)["command"]
    assert command[command.index("--revision") + 1] == "v1"


def test_a_revision_that_does_not_fit_the_model_is_one_error(hub):
    args = ["predict", "--gpu", "h100", "--input-len", "64", "--output-len", "8"]
    for extra, said in (
        (["--model", "llama-3-8b", "--revision", "v1"], "'llama-3-8b' is a preset"),
        (["--model", "acme/tiny-llama@v2", "--revision", "v1"], "names revision v2, --revision v1"),
        (["--revision", "v1", "--model", "./config.json"], "is not a Hub id"),
    ):
        r = CliRunner().invoke(main, [*args, *extra])
        assert r.exit_code == 2 and said in r.output and "Traceback" not in r.output, r.output


def test_uncached_offline_is_one_error_saying_how(hub):
    r = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", "acme/not-cached"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    [line] = [x for x in r.output.splitlines() if x.startswith("Error:")]
    assert "acme/not-cached" in line and "HF_HUB_OFFLINE" in line and "huggingface-cli download" in line
    assert "config.json path" in line


def test_a_bad_cached_config_gives_the_readers_error(hub):
    cache(hub, "acme/broken", '{"hidden_size": 64, "num_attention_heads": 4}')
    with pytest.raises(CostModelError, match="num_hidden_layers"):
        costmodel.load_model("acme/broken")
    cache(hub, "acme/notjson", "{not json")
    r = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", "acme/notjson"])
    assert r.exit_code == 1 and "Error:" in r.output and "Traceback" not in r.output


def test_presets_come_first_and_odd_names_are_not_ids(hub):
    assert costmodel.load_model("Qwen/Qwen3-32B").id == "qwen3_32b"  # a preset's Hub alias: the preset
    for name in ("acme/../etc", "acme/tiny-llama@../x"):
        with pytest.raises(CostModelError):
            costmodel.load_model(name)
