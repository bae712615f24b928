"""`costmodel serve`: the JSON API is the command line (its answer equals `--json` for the same options), a bad
option answers the command's `Error:` text with 400, nothing outside the page, the API and the reports is served,
the server listens on this machine only unless told otherwise, and 200 requests at once all get their answer."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner

starlette = pytest.importorskip("starlette", reason="the web extra (pip install 'costmodel[web]')")
from starlette.testclient import TestClient  # noqa: E402

from costmodel.cli import main  # noqa: E402
from costmodel.web import app  # noqa: E402

CASES = [
    ("predict", [("gpu", "a100")]),
    ("predict", [("gpu", "a100"), ("gpu", "h100"), ("variant", "gqa"), ("batch", "8")]),
    ("predict", [("gpu", "h100"), ("model", "llama-3-8b"), ("tp", "2"), ("context", "2048")]),
    ("predict", [("gpu", "h100"), ("model", "llama-3-8b"), ("input-len", "512"), ("output-len", "32")]),
    ("predict", [("gpu", "h100"), ("model", "llama-3-8b"), ("engine", "sglang"), ("concurrency", "4"),
                 ("input-len", "256"), ("output-len", "16"), ("num-requests", "8")]),
    ("capacity", [("gpu", "h100"), ("gpu", "a100"), ("model", "llama-3-8b"), ("input-len", "512"),
                  ("output-len", "64"), ("tpot-ms", "30")]),
    ("derive", [("variant", "mqa"), ("mode", "incremental")]),
]


@pytest.fixture(scope="module")
def client():
    return TestClient(app(main))


def _cli(command, query, extra):
    args = [command]
    for key, value in query:
        args += [f"--{key}", value]
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
    query = [("gpu", "h100"), ("model", "llama-3-8b"), ("gpus", "2"), ("input-len", "512"), ("output-len", "64"),
             ("tpot-ms", "30"), ("max-concurrency", "8")]
    response = client.get("/report/plan", params=query)
    assert response.status_code == 200 and "<svg" in response.text and "the front" in response.text
    assert 'name="gpus"' in client.get("/").text and "<option>plan</option>" in client.get("/").text


def test_a_report_is_the_commands_page(client):
    query = [("gpu", "h100"), ("model", "llama-3-8b")]
    response = client.get("/report/predict", params=query)
    assert response.status_code == 200 and response.text.startswith("<!DOCTYPE html>")
    assert "<svg" in response.text and "costmodel predict --gpu h100 --model llama-3-8b" in response.text


@pytest.mark.parametrize("path,query,expected", [
    ("/api/predict", [("gpu", "nosuchgpu")], "gpu 'nosuchgpu' is no profile id or alias"),
    ("/api/predict", [("gpu", "hardware_profiles/h100_sxm.yaml")], "never a path"),
    ("/api/predict", [("gpu", "h100"), ("model", "/etc/passwd")], "never a path"),
    ("/api/predict", [("gpu", "h100"), ("model", "llama-3-8b"), ("config", "{}")], "give one model"),
    ("/api/predict", [("gpu", "h100"), ("config", "x" * 40000)], "more than 32 kB"),
    ("/api/predict", [("gpu", "h100"), ("config", "not json")], "Error: pasted config.json: not valid JSON"),
    ("/api/predict", [("gpu", "a100"), ("batch", "-3")], "-3"),
    ("/api/predict", [("gpu", "a100"), ("no-such-option", "1")], "No such option"),
    ("/api/predict", [("gpu", "a100"), ("out", "/etc/passwd")], "does not go over the web"),
    ("/api/calibrate", [], "unknown command 'calibrate'"),
    ("/report/derive", [], "unknown command 'derive'"),
])
def test_bad_options_answer_the_error_with_400(client, path, query, expected):
    response = client.get(path, params=query)
    assert response.status_code == 400
    assert response.text.startswith("Error:") and expected in response.text


@pytest.mark.parametrize("path", ["/../etc/passwd", "/static/../../pyproject.toml", "/api", "/nothing"])
def test_nothing_else_is_served(client, path):
    response = client.get(path)
    # not found, and no file's content behind it (pyproject.toml's table names, /etc/passwd's root entry)
    assert response.status_code == 404 and "[project]" not in response.text and "root:" not in response.text


def test_the_page_holds_every_device_and_keeps_its_state_in_the_url(client):
    page = client.get("/").text
    assert 'value="h100_sxm"' in page and 'value="tpu_v5e"' in page and 'value="llama_3_8b"' in page
    # the page reads its fields from the query and fetches the report of that query (a link reproduces the view)
    assert "new URLSearchParams(window.location.search)" in page and "fetch('/report/'" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched from elsewhere


def test_the_server_listens_on_this_machine_only_by_default():
    from costmodel.cli import serve

    host = next(p for p in serve.params if p.name == "host")
    assert host.default == "127.0.0.1"


def test_two_hundred_requests_at_once(client):
    queries = [[("gpu", g), ("variant", v)] for g in ("a100", "h100") for v in ("mha", "gqa", "mqa", "mha", "mqa")]
    expected = {tuple(q): json.loads(_cli("predict", q, ["--json"]).output) for q in queries}
    jobs = [queries[i % len(queries)] for i in range(200)]
    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = list(pool.map(lambda q: (q, client.get("/api/predict", params=q)), jobs))
    assert all(r.status_code == 200 for _, r in answers)
    assert all(r.json() == expected[tuple(q)] for q, r in answers)


@pytest.fixture
def browse(tmp_path):
    """A real Chromium (headless, nothing but this machine reachable) against the app served on a free local port:
    ``browse(path_and_query)`` is the page's DOM once its scripts ran (skipped where no chromium is installed)."""
    import shutil
    import socket
    import subprocess
    import threading
    import time

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    uvicorn = pytest.importorskip("uvicorn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app(main), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(100):
        if server.started:
            break
        time.sleep(0.05)
    runs = iter(range(1000))

    def dom(path: str) -> str:
        return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                               "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                               f"--user-data-dir={tmp_path / f'profile{next(runs)}'}", "--virtual-time-budget=20000",
                               "--dump-dom", f"http://127.0.0.1:{port}{path}"],
                              capture_output=True, text=True, timeout=120).stdout

    yield dom
    server.should_exit = True
    thread.join(timeout=10)


def _tpot(args: list[str]) -> str:
    """The TPOT ``costmodel`` prints for ``args``, as printed."""
    import re

    return re.search(r"TPOT (\S+ \S+)", CliRunner().invoke(main, args).output).group(1)


def test_a_browser_shows_the_clis_numbers_for_the_state_in_its_link(browse):
    """The page opened with a device and a model in its link, and then with another device: each time the report
    in the page shows the numbers `costmodel predict` prints for them."""
    shown = []
    for gpu in ("h100", "a100"):
        tpot = _tpot(["predict", "--gpu", gpu, "--model", "llama-3-8b"])
        assert f"TPOT {tpot}" in browse(f"/?command=predict&gpu={gpu}&model=llama-3-8b"), (gpu, tpot)
        shown.append(tpot)
    assert shown[0] != shown[1]  # the two devices' numbers differ: the page shows the one its link names


def test_a_plans_points_open_their_own_prediction(client, browse):
    """A plan's report names, for each point of its front, the query of the prediction that prices it alone; the
    page opened at that query shows the point's own numbers, as its command prints them."""
    import html
    import re
    from urllib.parse import parse_qsl

    report = client.get("/report/plan", params=[("gpu", "h100"), ("model", "llama-3-8b"), ("gpus", "2"),
                                                ("input-len", "512"), ("output-len", "64"),
                                                ("max-concurrency", "16")]).text
    queries = [html.unescape(q) for q in re.findall(r'<code class="point" data-query="([^"]+)"', report)]
    assert queries and all(q.startswith("command=predict&") for q in queries)
    query = queries[-1]  # the front's last point: the most clients
    args = ["predict"]
    for key, value in parse_qsl(query, keep_blank_values=True)[1:]:
        args += [f"--{key}", *([value] if value else [])]
    tpot = _tpot(args)
    assert f"TPOT {tpot}" in browse("/?" + query)
    assert "report.contentDocument.querySelectorAll('code.point')" in client.get("/").text


def test_the_variants_side_by_side(client):
    """A bare flag (``variants=``) is the command line's ``--variants``: the model and its MHA, GQA, MQA and MLA
    versions; the MLA row caches its latent and rotary key, (512 + 64) x 32 layers x 2 bytes = 36,864 bytes a token
    for Llama 3 8B, at batch 16 over the 4,096 cached positions and the step's own."""
    got = client.get("/api/predict?gpu=h100&model=llama-3-8b&variants=")
    assert got.status_code == 200
    rows = got.json()
    assert rows == json.loads(CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", "llama-3-8b",
                                                        "--variants", "--json"]).output)
    labels = [r["model"]["attention"] for r in rows]
    assert labels[0] == "GQA (g=8)" and {"MHA (g=32)", "MQA (g=1)", "MLA (latent 512 + rotary 64)"} <= set(labels)
    mla = rows[labels.index("MLA (latent 512 + rotary 64)")]
    assert mla["memory"]["kv_cache_bytes_per_device"] == 36_864 * 16 * 4097
    # the page's checkbox puts the bare flag in the URL and reads it back
    page = client.get("/").text
    assert 'name="variants" type="checkbox"' in page and "field.checked = true" in page


#: A config.json as Hugging Face publishes Llama 3 8B's (meta-llama/Meta-Llama-3-8B), the keys the model is read from.
LLAMA_3_8B_CONFIG = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                     "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256, "rms_norm_eps": 1e-05,
                     "rope_theta": 500000.0, "tie_word_embeddings": False, "hidden_act": "silu",
                     "architectures": ["LlamaForCausalLM"], "model_type": "llama"}


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
    preset = json.loads(CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--batch", "8",
                                                  "--json"]).output)
    assert got.json()["model"]["params"] == preset["model"]["params"]
    assert got.json()["decode"]["time_s"] == pytest.approx(preset["decode"]["time_s"], rel=1e-9)
    assert list(scratch.iterdir()) == []  # the request's folder is gone
