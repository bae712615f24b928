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
    assert 'name="gpus"' in client.get("/").text and "<option>plan</option>" in client.get("/").text


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


def test_the_page_holds_every_device_and_keeps_its_state_in_the_url(client):
    page = client.get("/").text
    assert 'value="h100_sxm"' in page and 'value="tpu_v5e"' in page and 'value="llama_3_8b"' in page
    # the page reads its fields from the query and fetches the report of that query (a link reproduces the view)
    assert "new URLSearchParams(window.location.search)" in page and "fetch('/report/'" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched from elsewhere


def test_the_server_listens_on_this_machine_only_by_default():
    from costmodel.cli.web import serve, web

    for command in (web, serve):
        host = next(p for p in command.params if p.name == "host")
        assert host.default == "127.0.0.1"


@pytest.fixture(scope="module")
def served():
    """The app served by Uvicorn on a free port of this machine: its base URL."""
    import socket
    import threading
    import time

    uvicorn = pytest.importorskip("uvicorn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app(main, port=port), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


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


@pytest.fixture
def browser(tmp_path, served):
    """A real Chromium (Debian's ``chromium``, headless, every host but this one unresolvable) driven through its
    ``chromedriver`` by Selenium, against the served app: ``(driver, base URL)``. Skipped where the browser, its
    driver or Selenium is not installed; nothing is downloaded."""
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.skip("no chromium and chromedriver on this machine (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="Selenium (the test extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1200,1000",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=chromedriver))
    driver.set_page_load_timeout(120)
    try:
        yield driver, served
    finally:
        driver.quit()


def _shown(driver, what: str = "TPOT") -> str:
    """The text of the report the page shows (in its frame), once it holds ``what``."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.switch_to.default_content()
    WebDriverWait(driver, 120).until(
        lambda d: (
            what
            in d.execute_script(
                "const f = document.getElementById('report').contentDocument;"
                "return f && f.body ? f.body.innerText : '';"
            )
        )
    )
    return driver.execute_script("return document.getElementById('report').contentDocument.body.innerText;")


def _tpot(args: list[str]) -> str:
    """The TPOT ``costmodel`` prints for ``args``, as printed (run as the server runs a command: one at a time, for
    the command line's output is this process's)."""
    import re

    return re.search(r"TPOT (\S+ \S+)", run(main, args)[1]).group(1)


def test_a_browser_changes_the_device_and_shows_the_clis_numbers(browser, tmp_path):
    """In the page opened with a device and a model in its link, a person picks another device in the form and
    shows it: each time the report shows the numbers `costmodel predict` prints for that device, the URL holds the
    new state, that URL opened afresh shows the same view, and the screenshot is a page, not a blank."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from costmodel.hardware.catalog import load_profile

    driver, base = browser
    driver.get(f"{base}/?command=predict&gpu=h100&model=llama-3-8b")
    first = _tpot(["predict", "--gpu", "h100", "--model", "llama-3-8b"])
    assert f"TPOT {first}" in _shown(driver)

    a100 = load_profile("a100").id
    devices = Select(driver.find_element(By.NAME, "gpu"))
    devices.deselect_all()
    devices.select_by_value(a100)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(driver, 60).until(lambda d: f"gpu={a100}" in d.current_url)
    second = _tpot(["predict", "--gpu", a100, "--model", "llama-3-8b"])
    assert second != first  # the two devices' numbers differ: the page shows the one chosen
    view = _shown(driver)
    assert f"TPOT {second}" in view and f"TPOT {first}" not in view
    assert "model=llama-3-8b" in driver.current_url  # the rest of the form kept

    shot = tmp_path / "page.png"
    assert driver.save_screenshot(str(shot))
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.std() > 0.05  # text, a form and a chart, not one colour
    blue = (
        (abs(pixels[..., 0] - 0x4C / 255) < 0.05)
        & (abs(pixels[..., 1] - 0x72 / 255) < 0.05)
        & (abs(pixels[..., 2] - 0xB0 / 255) < 0.05)
    )
    assert blue.sum() > 500  # the chart's bars (#4c72b0) are on screen

    link = driver.current_url
    driver.get(f"{base}/")  # elsewhere, then the link again: the same view
    driver.get(link)
    assert _shown(driver) == view


def test_switching_the_command_keeps_only_its_options(browser):
    """From a model's prediction, a person picks `derive` with MLA's Θ forms: the URL then holds derive's options
    only (the device and model, which derive does not take, are left out rather than refused), and the page shows
    the forms derive prints."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver, base = browser
    driver.get(f"{base}/?command=predict&gpu=h100&model=llama-3-8b")
    _shown(driver)
    Select(driver.find_element(By.NAME, "command")).select_by_visible_text("derive")
    Select(driver.find_element(By.NAME, "variant")).select_by_visible_text("mla")
    Select(driver.find_element(By.NAME, "mode")).select_by_visible_text("generate")
    driver.find_element(By.NAME, "asymptotic").click()
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(driver, 60).until(lambda d: "command=derive" in d.current_url)
    assert "gpu=" not in driver.current_url and "model=" not in driver.current_url
    expected = run(main, ["derive", "--variant", "mla", "--mode", "generate", "--asymptotic"])[1]
    shown = _shown(driver, "memory/arithmetic")
    assert "MHA  memory/arithmetic  Θ(n/d + 1/b)" in expected and "MHA  memory/arithmetic  Θ(n/d + 1/b)" in shown
    assert not driver.find_element(By.ID, "error").text


def test_clicking_a_plans_point_opens_its_own_prediction(browser):
    """In a plan's report on the page, clicking a point of the front opens the page at that point's prediction,
    which shows the numbers its command prints and the plan listed for that point."""
    import re
    from urllib.parse import parse_qsl, urlsplit

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver, base = browser
    driver.get(f"{base}/?command=plan&gpu=h100&model=llama-3-8b&gpus=2&input-len=512&output-len=64&max-concurrency=16")
    listed = _shown(driver, "point by point")
    driver.switch_to.frame(driver.find_element(By.ID, "report"))
    links = WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "a > code.point"))
    point = [code for code in links if "--engine" in code.text][-1]  # the front's last point: the most clients
    point.find_element(By.XPATH, "..").click()
    driver.switch_to.default_content()
    WebDriverWait(driver, 60).until(lambda d: "command=predict" in d.current_url)
    query = parse_qsl(urlsplit(driver.current_url).query, keep_blank_values=True)
    args = ["predict"]
    for key, value in query[1:]:
        args += [f"--{key}", *([value] if value else [])]
    printed = run(main, args)[1]
    clients = dict(query)["concurrency"]
    row = next(x for x in printed.splitlines() if f" c={clients} " in x)  # the table's row
    assert row in _shown(driver, "tok/s/device")
    # the plan listed this point's TPOT (to 4 figures) beside the command now opened
    from costmodel.render.text import duration

    tpot = json.loads(run(main, [*args, "--json"])[1])["tpot_s"]
    command = "costmodel " + " ".join(args)
    line = next(x for x in listed.splitlines() if x.endswith(command) or f"{command};" in x)
    assert re.search(r"TPOT (\S+ \S+),", line).group(1) == duration(tpot, 4)


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
    assert "<option>derive</option>" in client.get("/").text


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
    # the page's checkbox puts the bare flag in the URL and reads it back
    page = client.get("/").text
    assert 'name="variants" type="checkbox"' in page and "field.checked = true" in page


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
