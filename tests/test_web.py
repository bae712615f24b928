"""`costmodel web`: the JSON API is the command line (its answer equals `--json` for the same fields), a bad
field answers an `Error:` line naming it with 400, nothing outside the page, the API and the reports is served,
the server listens on this machine only unless told otherwise, and 200 requests at once are each answered or
refused with Retry-After, never left hanging. What the server refuses for safety: tests/test_web_security.py."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner

starlette = pytest.importorskip("starlette", reason="the web extra (python -m pip install -e '.[web]')")
from starlette.testclient import TestClient  # noqa: E402

from costmodel.cli.commands import main  # noqa: E402
from costmodel.web.app import app  # noqa: E402

#: Where the test client addresses the app (the server answers only the address it listens on).
BASE = "http://127.0.0.1:8000"


def run(cli, args: list[str]) -> tuple[int, str]:
    """(exit code, printed text) of ``costmodel ARGS`` run here, as the server's workers run it."""
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.output


CASES = [
    ("predict", [("gpu", "a100")]),
    ("predict", [("gpu", "a100"), ("gpu", "h100"), ("variant", "gqa"), ("batch", "8")]),
    ("predict", [("gpu", "h100"), ("model", "llama-3-8b"), ("tp", "2"), ("context", "2048")]),
    ("predict", [("gpu", "h100"), ("model", "llama-3-8b"), ("input-len", "512"), ("output-len", "32")]),
    (
        "predict",
        [
            ("gpu", "h100"),
            ("model", "llama-3-8b"),
            ("engine", "sglang"),
            ("concurrency", "4"),
            ("input-len", "256"),
            ("output-len", "16"),
            ("num-requests", "8"),
        ],
    ),
    (
        "capacity",
        [
            ("gpu", "h100"),
            ("gpu", "a100"),
            ("model", "llama-3-8b"),
            ("input-len", "512"),
            ("output-len", "64"),
            ("tpot-ms", "30"),
        ],
    ),
    ("derive", [("variant", "mqa"), ("mode", "incremental")]),
    ("derive", [("variant", "mla"), ("mode", "generate"), ("asymptotic", "")]),
    (
        "plan",
        [
            ("gpu", "h100"),
            ("model", "llama-3-8b"),
            ("gpus", "2"),
            ("input-len", "512"),
            ("output-len", "64"),
            ("tpot-ms", "30"),
            ("max-concurrency", "8"),
        ],
    ),
]


@pytest.fixture(scope="module")
def client():
    with TestClient(app(main), base_url=BASE) as c:
        yield c


def _cli(command, query, extra):
    args = [command]
    for key, value in query:
        args += [f"--{key}", *([value] if value else [])]  # an empty value: a bare flag
    result = CliRunner().invoke(main, [*args, *extra])
    return result


@pytest.mark.parametrize("command,query", CASES, ids=[f"{c} {' '.join(v for _, v in q[:3])}" for c, q in CASES])
def test_the_api_answers_what_the_command_line_prints(client, command, query):
    response = client.get(f"/api/{command}", params=query)
    assert response.status_code == 200, response.text
    expected = _cli(command, query, ["--json"])
    assert expected.exit_code == 0
    assert response.json() == json.loads(expected.output)


def test_a_plans_report_draws_its_front(client):
    query = [
        ("gpu", "h100"),
        ("model", "llama-3-8b"),
        ("gpus", "2"),
        ("input-len", "512"),
        ("output-len", "64"),
        ("tpot-ms", "30"),
        ("max-concurrency", "8"),
    ]
    response = client.get("/report/plan", params=query)
    assert response.status_code == 200 and "<svg" in response.text and "the front" in response.text


def test_a_report_is_the_commands_page(client):
    query = [("gpu", "h100"), ("model", "llama-3-8b")]
    response = client.get("/report/predict", params=query)
    assert response.status_code == 200 and response.text.startswith("<!DOCTYPE html>")
    assert "<svg" in response.text and "costmodel predict --gpu h100 --model llama-3-8b" in response.text


@pytest.mark.parametrize(
    "path,query,expected",
    [
        ("/api/predict", [("gpu", "nosuchgpu")], "field 'gpu': 'nosuchgpu' is not a shipped profile's id or alias"),
        ("/api/predict", [("gpu", "hardware_profiles/h100_sxm.yaml")], "never a path"),
        ("/api/predict", [("gpu", "h100"), ("model", "/etc/passwd")], "never a path"),
        ("/api/predict", [("gpu", "h100"), ("model", "llama-3-8b"), ("config", "{}")], "give one model"),
        ("/api/predict", [("gpu", "h100"), ("config", "x" * 40000)], "more than 32 kB"),
        ("/api/predict", [("gpu", "h100"), ("config", "not json")], "Error: pasted/config.json: not valid JSON"),
        ("/api/predict", [("gpu", "a100"), ("batch", "-3")], "-3"),
        ("/api/predict", [("gpu", "a100"), ("no-such-option", "1")], "predict takes no field 'no-such-option'"),
        ("/api/predict", [("gpu", "a100"), ("csv", "/etc/passwd")], "does not go over the web"),
        ("/api/predict", [("gpu", "h100"), ("model", "llama-3-8b"), ("tp", "3")], "Error: "),
        ("/api/calibrate", [], "unknown command 'calibrate'"),
        ("/report/validate", [], "unknown command 'validate'"),
    ],
)
def test_bad_fields_answer_the_error_with_400(client, path, query, expected):
    response = client.get(path, params=query)
    assert response.status_code == 400
    assert response.text.startswith("Error:") and expected in response.text


@pytest.mark.parametrize("path", ["/../etc/passwd", "/static/../../pyproject.toml", "/api", "/nothing"])
def test_nothing_else_is_served(client, path):
    response = client.get(path)
    # not found, and no file's content behind it (pyproject.toml's table names, /etc/passwd's root entry)
    assert response.status_code == 404 and "[project]" not in response.text and "root:" not in response.text


def test_the_page_holds_every_device_and_model_and_fetches_nothing_from_elsewhere(client):
    import re

    from costmodel.hardware.catalog import profile_ids
    from costmodel.model.presets import preset_ids

    page = client.get("/").text
    choices = json.loads(re.search(r'<script type="application/json" id="choices">(.*?)</script>', page).group(1))
    assert choices == {"gpu": profile_ids(), "model": preset_ids()} and "tpu_v5e" in choices["gpu"]
    # every script is this server's: plotly.js from the installed package, the page's own inline
    assert re.findall(r"(?:src|href)=\"(/[^\"]+)\"", page) == ["/static/plotly.min.js"] and "<script src" not in page
    assert "http://" not in page and "https://" not in page


def test_the_server_listens_on_this_machine_only_by_default():
    from costmodel.cli.web import serve, web

    for command in (web, serve):
        host = next(p for p in command.params if p.name == "host")
        assert host.default == "127.0.0.1"


def test_two_hundred_requests_at_once(served):
    """200 requests over HTTP on this machine, 64 at a time, against two workers and a queue of eight: each is
    answered (within a bound: no hang) with the command line's JSON for its query, or refused with 503 and a
    Retry-After while the queue is full, and a client that tries again gets its answer."""
    import time
    import urllib.error
    import urllib.request
    from urllib.parse import urlencode

    queries = [[("gpu", g), ("variant", v)] for g in ("a100", "h100") for v in ("mha", "gqa", "mqa", "mha", "mqa")]
    expected = {tuple(q): json.loads(_cli("predict", q, ["--json"]).output) for q in queries}
    jobs = [queries[i % len(queries)] for i in range(200)]
    refused = []

    def get(q):
        for _ in range(2000):
            try:
                with urllib.request.urlopen(f"{served}/api/predict?{urlencode(q)}", timeout=120) as response:
                    return q, response.status, json.loads(response.read())
            except urllib.error.HTTPError as err:
                assert err.code == 503 and int(err.headers["Retry-After"]) > 0, err.read()
                refused.append(q)
                time.sleep(0.05)  # sooner than Retry-After asks: this client is in a hurry
        raise AssertionError("never answered")

    with ThreadPoolExecutor(max_workers=64) as pool:
        answers = list(pool.map(get, jobs, timeout=300))
    assert len(answers) == 200 and all(status == 200 for _, status, _ in answers)
    assert all(body == expected[tuple(q)] for q, _, body in answers)
    assert refused  # 64 at once against 2 + 8 places: the queue did refuse some


def test_the_variants_page_links_their_theta_forms(client):
    """A model's layouts side by side link the page of their Θ forms (derive's, MLA with MHA, GQA and MQA beside
    it), which is the command line's page and carries Shazeer's MHA form, Θ(n/d + 1/b), and the derived MQA one,
    Θ(1/d + n/(dh) + 1/b) with the logits' h n / d^2 term the paper leaves out."""
    import html
    import re

    report = client.get("/report/predict", params=[("gpu", "h100"), ("model", "llama-3-8b"), ("variants", "")]).text
    (query,) = [html.unescape(q) for q in re.findall(r'<code class="point" data-query="([^"]+)"', report)]
    assert query == "command=derive&variant=mla&mode=generate&asymptotic="
    theta = client.get("/report/derive?" + query.split("&", 1)[1])
    assert theta.status_code == 200
    shown = html.unescape(theta.text)
    assert "MHA  memory/arithmetic  Θ(n/d + 1/b)" in shown
    assert "MQA  memory/arithmetic  Θ(1/d + n/(d*h) + h*n/d**2 + 1/b)" in shown


def test_the_variants_side_by_side(client):
    """A bare flag (``variants=``) is the command line's ``--variants``: the model and its MHA, GQA, MQA and MLA
    versions; the MLA row caches its latent and rotary key, (512 + 64) x 32 layers x 2 bytes = 36,864 bytes a token
    for Llama 3 8B, at batch 16 over the 4,096 cached positions and the step's own."""
    got = client.get("/api/predict?gpu=h100&model=llama-3-8b&variants=")
    assert got.status_code == 200
    rows = got.json()
    assert rows == json.loads(
        CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--variants", "--json"]).output
    )
    labels = [r["model"]["attention"] for r in rows]
    assert labels[0] == "GQA (g=8)" and {"MHA (g=32)", "MQA (g=1)", "MLA (latent 512 + rotary 64)"} <= set(labels)
    mla = rows[labels.index("MLA (latent 512 + rotary 64)")]
    assert mla["memory"]["kv_cache_bytes_per_device"] == 36_864 * 16 * 4097
    # the page's variants view is the same four models, by the library
    view = client.get("/api/v1/view?view=variants&model=llama-3-8b").json()
    assert [r["attention"] for r in view["tables"][0]["rows"]] == labels
    assert [r["tpot_ms"] / 1e3 for r in view["tables"][0]["rows"]] == [r["total"]["tpot_s"] for r in rows]


#: A config.json as Hugging Face publishes Llama 3 8B's (meta-llama/Meta-Llama-3-8B), the keys the model is read from.
LLAMA_3_8B_CONFIG = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
}


def test_a_pasted_config_is_the_command_line_on_that_file(client, tmp_path, monkeypatch):
    """``config=<text>`` prices the model the text describes, as ``--model FILE`` does on a file of that text (the
    only difference the file's own path in the source line), and it is the preset's model: the same parameters and
    step time as llama-3-8b; nothing of it stays on disk."""
    import re
    import tempfile

    text = json.dumps(LLAMA_3_8B_CONFIG)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the request's private folder goes
    got = client.get("/api/predict", params=[("gpu", "h100"), ("config", text), ("batch", "8")])
    assert got.status_code == 200, got.text
    file = tmp_path / "pasted" / "config.json"
    file.parent.mkdir()
    file.write_text(text)
    want = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", str(file), "--batch", "8", "--json"])
    unpathed = lambda s: re.sub(r"\S*/pasted/config\.json", "pasted/config.json", s)  # noqa: E731
    assert json.loads(unpathed(got.text)) == json.loads(unpathed(want.output))
    preset = json.loads(
        CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--batch", "8", "--json"]).output
    )
    assert got.json()["model"]["params"] == preset["model"]["params"]
    assert got.json()["decode"]["time_s"] == pytest.approx(preset["decode"]["time_s"], rel=1e-9)
    assert list(scratch.iterdir()) == []  # the request's folder is gone
