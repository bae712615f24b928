"""The page's JSON API over the library: a view is asked as a typed request (:class:`ViewRequest`), computed once
in a worker (:mod:`costmodel.web.jobs`), and kept by its inputs, so the same view asked again (another visitor,
a reload, a comparison that holds it) is answered at once.

- ``POST /api/v1/jobs`` (the request's fields as JSON): 200 with the view when it is kept; else 202 and the job's
  id, which ``GET /api/v1/jobs/<id>`` answers with its state, its progress and, once done, the view; ``DELETE``
  cancels it (its worker is stopped). Two visitors asking the same view share one computation.
- ``GET /api/v1/view?<field>=<value>&...``: the same, waited for (a list field repeats or takes commas).
- ``GET /api/v1/form``: the fields, grouped, with their types, bounds and defaults.
- A bad field answers 422 with each field named; a body over :data:`MAX_BODY_BYTES` 413; a full queue 503.
"""

from __future__ import annotations

import asyncio
import collections
import json
import secrets
import time
from dataclasses import dataclass, field

from costmodel.web.jobs import Busy, OverLimit, ViewJob
from costmodel.web.requests import ViewRequest

#: The largest request body (a pasted config.json fits) and the most fields in one.
MAX_BODY_BYTES = 64 * 1024
#: Views kept by their inputs, and finished jobs remembered for their pages to read.
CACHE_VIEWS = 128
KEEP_JOBS = 256
#: The most results pinned beside one (a comparison, in its URL or its offline file).
MAX_PINS = 8
#: Fields that hold a list (repeated in a query, or separated by commas).
LISTS = ("gpu", "concurrency", "request-rate")


@dataclass
class Job:
    """One computation of a view: queued, running, done, failed or cancelled, with its progress."""

    id: str
    key: str
    state: str = "queued"
    progress: dict = field(default_factory=dict)
    result: str | None = None  # the view's JSON
    error: str | None = None
    status: int = 200
    started: float = field(default_factory=time.monotonic)
    cancelled: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def answer(self) -> dict:
        out = {"id": self.id, "state": self.state, "progress": self.progress, "error": self.error}
        out["seconds"] = round(time.monotonic() - self.started, 3)
        return out


class Views:
    """The kept views and the jobs computing others, over a worker pool."""

    def __init__(self, pool):
        self.pool = pool
        self.kept: collections.OrderedDict[str, str] = collections.OrderedDict()
        self.jobs: collections.OrderedDict[str, Job] = collections.OrderedDict()

    def start(self, req: ViewRequest) -> Job:
        """The job computing ``req``'s view: done at once where it is kept, shared where one is computing it."""
        key = req.key()
        if key in self.kept:
            self.kept.move_to_end(key)
            job = self._new(key)
            job.state, job.result = "done", self.kept[key]
            job.done.set()
            return job
        for job in self.jobs.values():
            if job.key == key and job.state in ("queued", "running"):
                return job
        in_flight = sum(j.state in ("queued", "running") for j in self.jobs.values())
        if in_flight >= self.pool.limits.workers + self.pool.limits.queue:
            raise Busy(f"the server is busy: {in_flight} views computing or waiting, its most; try again shortly")
        job = self._new(key)
        asyncio.get_running_loop().create_task(self._run(job, req))
        return job

    def _new(self, key: str) -> Job:
        job = Job(id=secrets.token_hex(8), key=key)  # not guessable: only its page follows or cancels it
        self.jobs[job.id] = job
        while len(self.jobs) > KEEP_JOBS:
            oldest = next(iter(self.jobs.values()))
            if oldest.state in ("queued", "running"):
                break
            self.jobs.popitem(last=False)
        return job

    async def _run(self, job: Job, req: ViewRequest) -> None:
        async def gone() -> bool:
            return job.cancelled

        def progress(done: int, total: int, what: str) -> None:
            job.state = "running"
            job.progress = {"done": done, "total": total, "what": what}

        try:
            result = await self.pool.run(ViewJob(req.model_dump_json(by_alias=True)), gone, progress)
        except (Busy, OverLimit) as err:
            job.state, job.error, job.status = "failed", f"Error: {err}", 503 if isinstance(err, Busy) else 422
        else:
            if result is None:
                job.state, job.error, job.status = "cancelled", "Error: cancelled", 409
            elif result[0] != 0:
                job.state, job.error, job.status = "failed", result[1].strip(), 500 if result[0] == 3 else 400
            else:
                job.state, job.result = "done", result[1]
                self.kept[job.key] = result[1]
                while len(self.kept) > CACHE_VIEWS:
                    self.kept.popitem(last=False)
        job.done.set()

    def cancel(self, ident: str) -> Job | None:
        job = self.jobs.get(ident)
        if job is not None and job.state in ("queued", "running"):
            job.cancelled = True
        return job


def field_errors(err) -> list[dict]:
    """pydantic's errors as ``{"field", "message"}``, the field by its request name ("" for the whole)."""
    return [
        {"field": ".".join(str(p) for p in e["loc"] if not isinstance(p, int)), "message": e["msg"][:300]}
        for e in err.errors()
    ]


def from_query(items) -> dict:
    """A query's (key, value) pairs as a request's fields: a list field's values gathered (commas split), a bare
    flag (``key=``) true."""
    out: dict = {}
    for key, value in items:
        if key in LISTS:
            out.setdefault(key, []).extend(v for v in value.split(",") if v)
        else:
            out[key] = "true" if value == "" else value
    return out


async def exported(views: Views, items) -> dict:
    """The views a page's URL shows (its fields, and each ``pin``'s query), computed or kept, as the page's saved
    state: ``{"current": {"query", "view"}, "pins": [...]}``. :class:`CostModelError` names a bad field."""
    from urllib.parse import parse_qsl, urlencode

    from pydantic import ValidationError

    from costmodel.core.errors import CostModelError

    pins = [v for k, v in items if k == "pin"]
    if len(pins) > MAX_PINS:
        raise CostModelError(f"{len(pins)} pinned results; at most {MAX_PINS}")
    queries = [*(parse_qsl(p, keep_blank_values=True) for p in pins), [(k, v) for k, v in items if k != "pin"]]
    configs = []
    for query in queries:
        try:
            req = ViewRequest.model_validate(from_query(query))
        except ValidationError as err:
            raise CostModelError("; ".join(f"{e['field']}: {e['message']}" for e in field_errors(err))) from None
        job = views.start(req)
        await job.done.wait()
        if job.state != "done":
            raise CostModelError((job.error or job.state).removeprefix("Error: "))
        configs.append({"query": urlencode(query), "view": json.loads(job.result)})
    return {"current": configs[-1], "pins": configs[:-1]}


def routes(views: Views) -> list:
    """The API's routes (Starlette)."""
    from pydantic import ValidationError
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    def invalid(err: ValidationError) -> Response:
        return JSONResponse({"error": "invalid fields", "fields": field_errors(err)}, status_code=422)

    def begin(data: dict):
        """The job computing the view ``data`` asks for, or the answer refusing it (422, 503)."""
        try:
            req = ViewRequest.model_validate(data)
        except ValidationError as err:
            return invalid(err)
        try:
            return views.start(req)
        except Busy as err:
            return JSONResponse({"error": str(err)}, status_code=503, headers={"Retry-After": "5"})

    def done(job: Job) -> Response:
        if job.state == "done":
            body = f'{{"id": "{job.id}", "state": "done", "view": {job.result}}}'
            return Response(body, media_type="application/json")
        return JSONResponse(job.answer(), status_code=job.status if job.state != "running" else 202)

    async def create(request):
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return JSONResponse({"error": f"a request of more than {MAX_BODY_BYTES // 1024} kB"}, status_code=413)
        try:
            data = json.loads(body or b"{}")
        except json.JSONDecodeError as err:
            return JSONResponse({"error": f"the body is not JSON: {err.msg}"}, status_code=400)
        job = begin(data if isinstance(data, dict) else {"": data})
        if isinstance(job, Response):
            return job
        if job.state == "done":
            return done(job)
        return JSONResponse(job.answer(), status_code=202)

    async def status(request):
        job = views.jobs.get(request.path_params["ident"])
        if job is None:
            return JSONResponse({"error": "no such job (finished jobs are kept a while)"}, status_code=404)
        if request.method == "DELETE":
            views.cancel(job.id)
            return JSONResponse({"id": job.id, "state": "cancelling" if job.cancelled else job.state})
        return done(job) if job.state != "queued" else JSONResponse(job.answer(), status_code=202)

    async def view(request):
        job = begin(from_query(request.query_params.multi_items()))
        if isinstance(job, Response):
            return job
        waiting = asyncio.ensure_future(job.done.wait())
        while not waiting.done():
            if await request.is_disconnected():
                views.cancel(job.id)
                waiting.cancel()
                return Response(status_code=499)
            await asyncio.sleep(0.02)
        return Response(job.result, media_type="application/json") if job.state == "done" else done(job)

    return [
        Route("/api/v1/jobs", create, methods=["POST"]),
        Route("/api/v1/jobs/{ident}", status, methods=["GET", "DELETE"]),
        Route("/api/v1/view", view),
        *_pages(views),
    ]


def _pages(views: Views) -> list:
    """The form's fields, plotly.js and a saved page (Starlette routes)."""
    from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    async def form(request):
        from costmodel.web.requests import form as fields

        return JSONResponse(fields())

    async def plotly(request):
        from costmodel.render.interactive import plotly_js

        script = plotly_js()
        if script is None:
            return JSONResponse({"error": "plotly is not installed (python -m pip install -e '.[web]')"}, 404)
        return Response(script, media_type="text/javascript")

    async def export(request):
        from costmodel.core.errors import CostModelError
        from costmodel.web.page import render

        try:
            saved = await exported(views, request.query_params.multi_items())
        except CostModelError as err:
            return PlainTextResponse(f"Error: {err}\n", status_code=400)
        name = f"costmodel-{saved['current']['view']['view']}.html"
        return HTMLResponse(render(saved), headers={"content-disposition": f'attachment; filename="{name}"'})

    return [Route("/api/v1/form", form), Route("/static/plotly.min.js", plotly), Route("/export", export)]
