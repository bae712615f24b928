"""What `costmodel web` refuses: every request that once wrote or read the user's files, a Host that is not the
server's (DNS rebinding), a computation asked by another site's page, and work past its limits; a long computation
is cut at its time limit or when its client leaves, and a cheap request is answered while an expensive one runs.

Each reproducer runs against the app (Starlette's test client), with a canary file and a folder watched: no file
appears or changes, and no line of a secret file comes back."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("starlette", reason="the web extra")
from starlette.testclient import TestClient  # noqa: E402

from costmodel.cli.commands import main  # noqa: E402
from costmodel.web.app import app, host_names, refusal  # noqa: E402
from costmodel.web.jobs import Limits  # noqa: E402

BASE = "http://127.0.0.1:8000"
SECRET = "SECRET_LINE_HERE=xyz"
#: A served prediction that runs for seconds here (4,096 clients, 10,000 requests of 8,192 output tokens).
EXPENSIVE = [
    ("gpu", "h100"),
    ("model", "llama-3-8b"),
    ("engine", "vllm"),
    ("concurrency", "4096"),
    ("num-requests", "10000"),
    ("input-len", "1024"),
    ("output-len", "8192"),
]


@pytest.fixture(scope="module")
def client():
    with TestClient(app(main), base_url=BASE) as c:
        yield c


@pytest.fixture
def files(tmp_path):
    """A folder to watch, a canary file in it, and a secret .env file whose second line must never be answered."""
    canary = tmp_path / "canary.txt"
    canary.write_text("canary\n")
    secret = tmp_path / ".env"
    secret.write_text(f"FIRST=1\n{SECRET}\n")
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.iterdir()}
    yield tmp_path
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.iterdir()}
    assert after == before  # nothing created, changed or removed


def _reproducers(folder) -> list[tuple[str, str]]:
    """(path, raw query) of each request that wrote or read a file before the allow-list."""
    canary, secret, new = folder / "canary.txt", folder / ".env", folder / "new.csv"
    out = []
    for kind in ("csv", "html", "plot", "format", "json", "out"):
        out.append(("/api/predict", f"gpu=h100&sweep=batch=1:2:x2&{kind}%3D{canary}="))
        out.append(("/api/predict", f"gpu=h100&{kind}={canary}"))
        out.append(("/api/plan", f"gpu=h100&model=llama-3-8b&gpus=1&{kind}%3D{new}="))
    out += [
        ("/api/predict", f"gpu=h100&variants=--csv={canary}"),
        ("/api/predict", f"gpu=h100&model=llama-3-8b&variants=--html%3D{new}"),
        ("/api/predict", f"gpu=h100&sweep=batch=1:2:x2&csv={new}"),
        ("/api/predict", f"gpu=h100&model=llama-3-8b&engine=vllm&concurrency=2&lengths-file={secret}"),
        ("/api/predict", f"gpu=h100&model=llama-3-8b&engine=vllm&concurrency=2&lengths-file%3D{secret}="),
        ("/api/predict", f"gpu=h100&model=llama-3-8b&disaggregated=&decode-gpu={secret}"),
        ("/api/predict", f"gpu=h100&model={secret}"),
        ("/api/predict", f"gpu={secret}"),
        ("/api/predict", f"gpu=h100&model-config={secret}"),
        ("/api/predict", f"gpu=h100&model=llama-3-8b&engine=vllm&concurrency={secret}"),
        ("/api/capacity", f"gpu=h100&model=llama-3-8b&tpot-ms=--html={new}"),
    ]
    return out + [("/report/" + path.removeprefix("/api/"), query) for path, query in out]


def test_no_request_writes_or_reads_a_file(client, files):
    """Every reproducer is refused with 400 naming its field, before anything runs: no file appears or changes
    (the fixture checks), and no response holds the secret file's line."""
    for path, query in _reproducers(files):
        response = client.get(f"{path}?{query}")
        assert response.status_code == 400, (path, query, response.text)
        assert response.text.startswith("Error: field") or "takes no field" in response.text, response.text
        assert SECRET not in response.text and "canary\n" not in response.text


def test_a_pasted_config_is_read_in_memory(client, files, monkeypatch):
    """A pasted config.json is priced without a file: no temporary folder is made for it (tempfile is not asked
    for one), and an error in it quotes the paste, never a path on this machine."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(files))  # any temporary file would land in the watched folder
    response = client.get("/api/predict", params=[("gpu", "h100"), ("config", '{"hidden_size": 4096}')])
    assert response.status_code == 400
    assert response.text.startswith("Error: pasted/config.json: cannot read num_attention_heads")
    assert str(files) not in response.text


@pytest.mark.parametrize(
    "host", ["attacker.example:8000", "attacker.example", "127.0.0.1:9999", "localhost:80", "127.0.0.1.nip.io:8000", ""]
)
@pytest.mark.parametrize("path", ["/", "/api/predict?gpu=h100", "/report/predict?gpu=h100", "/nothing"])
def test_a_foreign_host_gets_400(client, host, path):
    """DNS rebinding: a page whose own name resolves to this machine sends its name as Host; only the address and
    port the server listens on are answered."""
    response = client.get(path, headers={"Host": host})
    assert response.status_code == 400 and "this server answers requests addressed to" in response.text


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://attacker.example"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:9999"},
        {"Sec-Fetch-Site": "same-origin", "Origin": "http://attacker.example"},
    ],
)
@pytest.mark.parametrize("path", ["/api/predict?gpu=h100", "/report/predict?gpu=h100"])
def test_a_cross_site_request_gets_403(client, headers, path):
    response = client.get(path, headers=headers)
    assert response.status_code == 403 and "refused" in response.text
    assert "access-control-allow-origin" not in response.headers


def test_the_page_itself_may_ask(client):
    """What the server's own page sends (same-origin fetch, its own Origin) and what a tool sends (no browser
    headers) are answered; no answer carries CORS headers, and each forbids framing."""
    for headers in ({"Sec-Fetch-Site": "same-origin", "Origin": BASE}, {"Sec-Fetch-Site": "none"}, {}):
        response = client.get("/api/predict?gpu=h100", headers=headers)
        assert response.status_code == 200, response.text
        assert "access-control-allow-origin" not in response.headers
        assert response.headers["x-frame-options"] == "DENY"
    preflight = client.options(
        "/api/predict?gpu=h100", headers={"Origin": "http://attacker.example", "Access-Control-Request-Method": "GET"}
    )
    assert preflight.status_code >= 400 and "access-control-allow-origin" not in preflight.headers


def test_the_hosts_a_server_answers():
    assert host_names("127.0.0.1", 8000) == {"127.0.0.1:8000", "localhost:8000", "[::1]:8000"}
    assert host_names("::1", 80) >= {"[::1]:80", "[::1]", "localhost"}
    assert host_names("0.0.0.0", 8000, ["box.lan"]) >= {"box.lan:8000", "0.0.0.0:8000", "127.0.0.1:8000"}
    assert "box.lan:8000" not in host_names("0.0.0.0", 8000)


@pytest.mark.parametrize(
    "query,limit",
    [
        ([("gpu", "h100")] * 5000, "fields in one query; at most 64"),
        ([("gpu", "h100")] * 9, "field 'gpu' is given more than 8 times"),
        ([("gpu", "h100"), ("batch", "65537")], "from 1 to 65,536"),
        ([("gpu", "h100"), ("model", "llama-3-8b"), ("engine", "vllm"), ("concurrency", "1000000")], "to 4,096"),
        (
            [
                ("gpu", "h100"),
                ("model", "llama-3-8b"),
                ("engine", "vllm"),
                ("concurrency", "8"),
                ("num-requests", "1000000"),
            ],
            "to 10,000",
        ),
        ([("gpu", "h100"), ("model", "llama-3-8b"), ("input-len", str(1 << 21))], "to 1,048,576"),
        ([("gpu", "h100"), ("model", "llama-3-8b"), ("tp", "1099511627776")], "to 64"),
        ([("gpu", "h100"), ("config", "{" + " " * 40000 + "}")], "more than 32 kB"),
        ([("gpu", "h100"), ("model", "x" * 1000)], "at most 128"),
    ],
)
def test_a_request_past_its_limits_gets_4xx_naming_the_limit(client, query, limit):
    response = client.get("/api/predict", params=query)
    assert 400 <= response.status_code < 500 and limit in response.text, response.text


def test_an_overlong_query_gets_414():
    """Past 128 kB a query is refused before it is parsed (Uvicorn's HTTP parser may refuse it sooner; HTTP
    clients will not send it, so the request is made by hand)."""
    hosts = host_names("127.0.0.1", 8000)
    scope = {
        "type": "http",
        "path": "/api/predict",
        "headers": [(b"host", b"127.0.0.1:8000")],
        "query_string": b"gpu=h100&config=" + b"%20" * 50_000,
    }
    status, reason = refusal(scope, hosts)
    assert status == 414 and "a query of more than 128 kB" in reason
    assert refusal({**scope, "query_string": b"gpu=h100"}, hosts) is None


def test_a_long_computation_is_cut_at_its_time_limit():
    """A served prediction of seconds, under a one-second limit: 422 naming the limit, and the worker that ran it
    is stopped (the next request is answered by a fresh one)."""
    guarded = app(main, limits=Limits(workers=1, queue=0, seconds=1.0))
    with TestClient(guarded, base_url=BASE) as c:
        started = time.monotonic()
        response = c.get("/api/predict", params=EXPENSIVE)
        took = time.monotonic() - started
        assert response.status_code == 422 and "time limit of 1 s" in response.text
        assert took < 30  # a bound against a hang, not a speed target: uncut, the computation runs far longer
        assert guarded.pool.cut == 1 and guarded.pool.busy == 0
        assert c.get("/api/predict?gpu=h100").status_code == 200


def test_a_computation_past_its_memory_gets_422():
    """A worker held to one more MiB than it starts with runs out of memory on its first computation: 422 naming
    the limit, and the server answers on."""
    with TestClient(app(main, limits=Limits(workers=1, memory_bytes=1 << 20)), base_url=BASE) as c:
        response = c.get("/api/predict", params=EXPENSIVE)
        assert response.status_code == 422 and "ran out of memory" in response.text, response.text[-500:]
        assert c.get("/").status_code == 200


def test_a_full_queue_answers_503_with_retry_after():
    guarded = app(main, limits=Limits(workers=1, queue=0, seconds=60))
    with TestClient(guarded, base_url=BASE) as c:
        slow = threading.Thread(target=c.get, args=("/api/predict",), kwargs={"params": EXPENSIVE})
        slow.start()
        _until(lambda: guarded.pool.busy == 1)
        response = c.get("/api/predict?gpu=h100")
        assert response.status_code == 503 and int(response.headers["retry-after"]) > 0
        assert "busy" in response.text
        guarded.pool.close()
        slow.join(timeout=120)


def test_a_cheap_request_answers_while_an_expensive_one_runs():
    """Two workers: while one runs the expensive prediction, a one-layer prediction is answered within 2 s with
    the command line's numbers."""
    import json

    from click.testing import CliRunner

    guarded = app(main, limits=Limits(workers=2, queue=4, seconds=60))
    with TestClient(guarded, base_url=BASE) as c:
        slow = threading.Thread(target=c.get, args=("/api/predict",), kwargs={"params": EXPENSIVE})
        slow.start()
        _until(lambda: guarded.pool.busy == 1)
        started = time.monotonic()
        response = c.get("/api/predict?gpu=a100")
        took = time.monotonic() - started
        assert guarded.pool.busy == 1  # the expensive one still runs
        assert response.status_code == 200 and took < 2.0, took
        want = CliRunner().invoke(main, ["predict", "--gpu", "a100", "--json"]).output
        assert response.json() == json.loads(want)
        guarded.pool.close()
        slow.join(timeout=120)


def test_a_client_that_leaves_stops_its_computation():
    """Over HTTP: a client asks for the expensive prediction and hangs up; its worker is stopped at once, not
    when the computation would end."""
    import socket
    from urllib.parse import urlencode

    uvicorn = pytest.importorskip("uvicorn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    guarded = app(main, port=port, limits=Limits(workers=1, queue=0, seconds=600))
    server = uvicorn.Server(uvicorn.Config(guarded, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        _until(lambda: server.started)
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(f"GET /api/predict?{urlencode(EXPENSIVE)} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            _until(lambda: guarded.pool.busy == 1)
        _until(lambda: guarded.pool.busy == 0, timeout=10)
        assert guarded.pool.cut == 1
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_a_host_beyond_this_machine_is_warned_of(monkeypatch):
    from click.testing import CliRunner

    uvicorn = pytest.importorskip("uvicorn")
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    beyond = CliRunner().invoke(main, ["web", "--host", "0.0.0.0"])
    assert beyond.exit_code == 0 and "Warning: listening on 0.0.0.0" in beyond.output
    assert "no authentication" in beyond.output
    here = CliRunner().invoke(main, ["web"])
    assert here.exit_code == 0 and "Warning" not in here.output


def test_the_former_name_still_serves_with_a_note(monkeypatch):
    """`costmodel serve` runs the same server for one more release, and says it is now `costmodel web`."""
    from click.testing import CliRunner

    uvicorn = pytest.importorskip("uvicorn")
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda application, **k: served.append(k))
    old = CliRunner().invoke(main, ["serve", "--port", "8123"])
    assert old.exit_code == 0 and "Note: `costmodel serve` is now `costmodel web`" in old.output
    assert served == [{"host": "127.0.0.1", "port": 8123, "log_level": "warning"}]


def _until(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def test_no_worker_outlives_its_pool():
    """The server's end (its lifespan's) ends its workers."""
    guarded = app(main, limits=Limits(workers=2))
    with TestClient(guarded, base_url=BASE) as c:
        assert c.get("/api/predict?gpu=h100").status_code == 200
        assert guarded.pool.alive == 2
    assert guarded.pool.alive == 0
