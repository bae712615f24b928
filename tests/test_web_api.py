"""The page's JSON API (/api/v1): each view is the library's numbers, the same as the command line it names prints;
it is computed once and kept; a long one reports progress and can be cancelled; a bad field is refused with 422
naming it, an oversized request with 413; no value reaches a saved page unescaped."""

from __future__ import annotations

import json
import shlex
import time

import pytest
from click.testing import CliRunner

pytest.importorskip("starlette", reason="the web extra (python -m pip install -e '.[web]')")
from starlette.testclient import TestClient  # noqa: E402

from costmodel.cli.commands import main  # noqa: E402
from costmodel.web.app import app  # noqa: E402

BASE = "http://127.0.0.1:8000"
SMALL = {"model": "llama-3-8b", "input-len": 256, "output-len": 32}


@pytest.fixture(scope="module")
def client():
    with TestClient(app(main), base_url=BASE) as c:
        yield c


def _view(client, request: dict, timeout: float = 120) -> dict:
    """The view of ``request`` through the job API (POST, then polled), its answers' status codes checked."""
    response = client.post("/api/v1/jobs", json=request)
    deadline = time.monotonic() + timeout
    while response.status_code == 202 and time.monotonic() < deadline:
        time.sleep(0.02)
        response = client.get(f"/api/v1/jobs/{response.json()['id']}")
    assert response.status_code == 200, response.text
    return response.json()["view"]


def _printed(command: str) -> dict | list:
    """What the command line the view names prints with --json."""
    args = shlex.split(command)
    assert args[0] == "costmodel"
    result = CliRunner().invoke(main, [*args[1:], "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize(
    "request_,keys",
    [
        ({"view": "served", "concurrency": [8], **SMALL}, ("ttft_s", "tpot_s", "output_tokens_per_s", "mean_batch")),
        ({"view": "served", "request-rate": [4.0], "tp": 2, **SMALL}, ("ttft_s", "tpot_s", "requests_per_s")),
        ({"view": "step", "model": "llama-3-8b", "batch": 8, "context": 1024}, ("total",)),
        ({"view": "variants", "model": "llama-3-8b", "batch": 4, "context": 512}, None),
        ({"view": "attention", "batch": 32, "context": 8192}, None),
        ({"view": "attention", "variant": "gqa", "groups": 4, "mode": "batched", "seq": 512}, None),
        ({"view": "derive", "variant": "mqa", "mode": "generate"}, ("ops",)),
        (
            {"view": "served", "prefill-workers": 2, "decode-tp": 2, "request-rate": [4.0], **SMALL},
            ("ttft_s", "tpot_s", "ttft_split", "kv_transfer"),
        ),
        (
            {
                "view": "served",
                "length-dist": "uniform",
                "spread": 0.5,
                "warmup-requests": 4,
                "frontend": "engine",
                "client-connections": 4,
                "async-scheduling": True,
                **SMALL,
            },
            ("ttft_s", "tpot_s", "input_len", "num_requests"),
        ),
        (
            {
                "view": "served",
                "speculative-config": '{"method": "mtp", "num_speculative_tokens": 3}',
                "acceptance-length": 2.5,
                "prefix-len": 128,
                "turns": 1,
                "concurrency": [8],
                **SMALL,
            },
            ("ttft_s", "tpot_s", "prefix_hit_rate", "assumptions"),
        ),
        ({"view": "served", "turns": 3, "concurrency": [4], **SMALL}, ("ttft_s", "tpot_s", "prefix_hit_rate")),
        ({"view": "curve", "concurrency": [1, 4], **SMALL}, None),
        ({"view": "capacity", "tpot-ms": 30, "variants": False, **SMALL}, ("points",)),
        ({"view": "capacity", "ttft-ms": 500, "load": "request-rate", **SMALL}, ("points",)),
        ({"view": "plan", "gpus": 2, "max-concurrency": 8, "tpot-ms": 30, **SMALL}, ("front", "best")),
        ({"view": "recommend", "request-rate": [2.0], "tpot-ms": 40, "max-gpus": 4, **SMALL}, ("gpus", "layout")),
    ],
    ids=[
        "served",
        "served-rate",
        "step",
        "variants",
        "attention",
        "attention-gqa",
        "derive",
        "disagg",
        "served-more",
        "features",
        "turns",
        "curve",
        "capacity",
        "capacity-rate",
        "plan",
        "recommend",
    ],
)
def test_a_view_is_what_its_command_line_prints(client, request_, keys):
    view = _view(client, request_)
    printed = _printed(view["command"])
    if request_["view"] in ("variants", "attention"):  # the model and its other attentions, or the layer's, in order
        printed = printed if isinstance(printed, list) else [printed]
        assert [p["total"] for p in printed] == [p["total"] for p in view["report"]]
    elif keys is None:  # a curve: every point
        assert [p["tpot_s"] for p in printed["points"]] == [p["tpot_s"] for p in view["report"]]
        assert [p["ttft_s"] for p in printed["points"]] == [p["ttft_s"] for p in view["report"]]
    for key in keys or ():
        ours, theirs = view["report"][key], printed[key]
        if isinstance(ours, list) and ours and isinstance(ours[0], dict):  # the command line adds each point's command
            theirs = [{k: t[k] for k in o} for o, t in zip(ours, theirs, strict=True)]
        assert ours == theirs, key
    assert (view["charts"] and all(c["data"] for c in view["charts"])) or request_["view"] == "derive"
    for table in view["tables"]:  # every column named with its unit where it has one; rows hold only those
        assert all(set(row) == {c["key"] for c in table["columns"]} for row in table["rows"])


def test_a_served_views_timeline_conserves_its_iterations(client):
    """The timeline's last iteration ends when the run does (every request finished), its batches never pass the
    engine's sequence limit and its KV use never passes the pool."""
    view = _view(client, {"view": "served", "concurrency": [16], **SMALL})
    (chart,) = [c for c in view["charts"] if c["id"] == "timeline"]
    batch, prefill, kv = (t["y"] for t in chart["data"])
    assert max(batch) <= view["report"]["engine"]["max_num_seqs"] and max(batch) == view["report"]["max_batch"]
    assert max(kv) <= 100 + 1e-9 and min(prefill) >= 0
    # the run's span from its first arrival (time 0) to its last finish: requests / their rate
    report = view["report"]
    assert chart["data"][0]["x"][-1] == pytest.approx(report["num_requests"] / report["requests_per_s"], rel=1e-6)


def test_the_same_view_is_computed_once(client):
    request = {"view": "served", "concurrency": [3], **SMALL}
    first = client.post("/api/v1/jobs", json=request)
    assert first.status_code == 202  # not kept: computed in a worker
    _view(client, request)
    again = client.post("/api/v1/jobs", json={**request, "batch": 99})  # a field this view does not read
    assert again.status_code == 200 and again.json()["state"] == "done"
    assert again.json()["view"]["report"] == _view(client, request)["report"]


def test_a_long_view_shows_progress_and_can_be_cancelled(client):
    pool = client.app.pool
    cut = pool.cut
    request = {"view": "plan", "model": "llama-3.1-70b", "gpus": 8, "input-len": 2048, "output-len": 512}
    job = client.post("/api/v1/jobs", json=request).json()
    seen = {}
    for _ in range(2000):
        seen = client.get(f"/api/v1/jobs/{job['id']}").json()
        if seen.get("progress", {}).get("total"):
            break
        time.sleep(0.01)
    assert seen["progress"]["what"].startswith("layouts") and seen["progress"]["total"] > 1
    assert client.delete(f"/api/v1/jobs/{job['id']}").status_code == 200
    for _ in range(500):
        if client.get(f"/api/v1/jobs/{job['id']}").json()["state"] == "cancelled":
            break
        time.sleep(0.01)
    final = client.get(f"/api/v1/jobs/{job['id']}")
    assert final.status_code == 409 and final.json()["state"] == "cancelled" and pool.cut == cut + 1


@pytest.mark.parametrize(
    "request_,field,words",
    [
        ({"gpu": ["/etc/passwd"]}, "gpu", "never a path"),
        ({"gpu": ["h100"] * 9}, "gpu", "at most 8"),
        ({"model": "../../secrets"}, "model", "not a preset"),
        ({"tp": 0}, "tp", "greater than or equal to 1"),
        ({"input-len": 1 << 21}, "input-len", "less than or equal to 1048576"),
        ({"concurrency": list(range(1, 20)), "view": "curve"}, "concurrency", "at most 16"),
        ({"engine": "nosuch"}, "engine", "'vllm', 'sglang', 'trtllm' or 'atom'"),
        ({"csv": "/tmp/x.csv"}, "csv", "Extra inputs are not permitted"),
        ({"concurrency": [4], "request-rate": [2.0]}, "", "one of them"),
        ({"view": "served", "concurrency": [1, 2]}, "", "several are a curve"),
    ],
)
def test_a_bad_field_is_refused_with_422_naming_it(client, request_, field, words):
    response = client.post("/api/v1/jobs", json=request_)
    assert response.status_code == 422
    fields = response.json()["fields"]
    assert any(f["field"] == field and words in f["message"] for f in fields), fields
    query = client.get("/api/v1/view", params=[(k, str(v)) for k, v in request_.items() if not isinstance(v, list)])
    assert query.status_code in (200, 422)  # the query form validates the same model


def test_an_oversized_or_malformed_request_is_refused(client):
    assert client.post("/api/v1/jobs", content=b"{" + b" " * (70 * 1024) + b"}").status_code == 413
    assert client.post("/api/v1/jobs", content=b"not json").status_code == 400
    pins = [("pin", "view=step")] * 9
    response = client.get("/export", params=[("view", "step"), *pins])
    assert response.status_code == 400 and "at most 8" in response.text


def test_no_value_reaches_a_saved_page_unescaped(client):
    """A pasted config.json whose text closes the script it is saved in comes back inside a JSON string, escaped:
    the saved page holds no tag of it."""
    payload = "</script><img src=x onerror=alert(1)>"
    config = json.dumps(
        {
            "hidden_size": 512,
            "intermediate_size": 1024,
            "num_attention_heads": 8,
            "num_hidden_layers": 2,
            "num_key_value_heads": 8,
            "vocab_size": 1000,
            "model_type": "llama",
            "_name_or_path": payload,
            "architectures": ["LlamaForCausalLM"],
        }
    )
    from urllib.parse import urlencode

    page = client.get("/export?" + urlencode({"view": "step", "config": config}))
    assert page.status_code == 200 and page.headers["content-disposition"].startswith("attachment")
    assert "<img" not in page.text and payload not in page.text
    assert client.get("/api/v1/jobs/nosuch").status_code == 404


def test_the_form_is_the_requests_schema(client):
    """The form's groups hold every field a request takes, each once, with its default."""
    from costmodel.web.requests import ViewRequest

    form = client.get("/api/v1/form").json()
    names = [name for group in form.values() for name in group]
    aliases = [f.alias or name for name, f in ViewRequest.model_fields.items()]
    assert sorted(names) == sorted(aliases) and len(names) == len(set(names))
    assert form["load"]["input-len"]["default"] == 1024 and form["engine"]["engine"]["default"] == "vllm"


def test_a_plans_point_opens_its_own_served_view_with_its_numbers(client):
    """Each front point's link is the page's served view of that layout under its clients: the same TTFT and TPOT
    as the plan priced it."""
    from urllib.parse import parse_qsl

    from costmodel.web.api import from_query

    plan = _view(client, {"view": "plan", "gpus": 2, "max-concurrency": 8, **SMALL})
    rows = plan["tables"][0]["rows"]
    assert rows and all(r["open"] for r in rows)
    for row in rows[:: max(1, len(rows) // 3)]:
        served = _view(client, from_query(parse_qsl(row["open"])))
        assert served["report"]["ttft_s"] * 1e3 == pytest.approx(row["ttft_ms"], rel=1e-12)
        assert served["report"]["tpot_s"] * 1e3 == pytest.approx(row["tpot_ms"], rel=1e-12)


@pytest.mark.parametrize(
    "method,path,headers",
    [
        ("post", "/api/v1/jobs", {"origin": "http://evil.example"}),
        ("post", "/api/v1/jobs", {"sec-fetch-site": "cross-site"}),
        ("get", "/api/v1/view?view=step", {"sec-fetch-site": "same-site"}),
        ("get", "/export?view=step", {"origin": "http://127.0.0.1:9999"}),
    ],
)
def test_another_sites_page_may_not_compute_or_save(client, method, path, headers):
    response = getattr(client, method)(
        path, headers=headers, **({"json": {"view": "step"}} if method == "post" else {})
    )
    assert response.status_code == 403 and "another" in response.text
    assert "access-control-allow-origin" not in response.headers


def test_a_foreign_host_is_refused_before_the_api():
    """DNS rebinding: a page elsewhere whose name points here sends its own Host, and gets 400."""
    with TestClient(app(main), base_url="http://rebound.example:8000") as other:
        assert other.post("/api/v1/jobs", json={"view": "step"}).status_code == 400


def test_a_full_server_refuses_with_503_and_answers_again_after():
    """One worker and no queue: while a long view computes, another is refused with 503 and Retry-After (nothing
    is left waiting for it), and once the first is cancelled a new view is answered."""
    from costmodel.web.jobs import Limits

    guarded = app(main, limits=Limits(workers=1, queue=0))
    with TestClient(guarded, base_url=BASE) as c:
        long = c.post("/api/v1/jobs", json={"view": "plan", "model": "llama-3.1-70b", "gpus": 8}).json()
        for _ in range(3):
            refused = c.post("/api/v1/jobs", json={"view": "step", "batch": 3})
            assert refused.status_code == 503 and int(refused.headers["retry-after"]) > 0
        c.delete(f"/api/v1/jobs/{long['id']}")
        for _ in range(500):
            if c.get(f"/api/v1/jobs/{long['id']}").json()["state"] == "cancelled":
                break
            time.sleep(0.01)
        assert _view(c, {"view": "step", "batch": 3})["view"] == "step"
