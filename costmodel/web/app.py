"""``costmodel web``'s server: a local page over the command line, and its commands as a JSON API, answering this
machine's browser only.

``GET /api/<command>?<field>=<value>...`` answers what ``costmodel <command> ... --json`` prints for those fields,
and ``GET /report/<command>?...`` the command's self-contained ``--html`` page; ``/`` is the page, a form whose
state is its URL. A query holds fields, never flags: :mod:`costmodel.web.fields` builds the command from an
allow-list of typed, bounded fields (a model or device is a shipped id, a model of one's own a pasted config.json
read in memory), so no request reads or writes a file it names. The server answers only requests addressed to it
by the name and port it listens on (a page elsewhere that rebinds its own name to this address is refused), and a
computation only for its own page (a request another site's page sends is refused); every computation runs in a
worker process under a time and memory limit, behind a small queue (:mod:`costmodel.web.jobs`). It needs the
``web`` extra (Starlette, and Uvicorn to listen). docs/web.md says what it trusts and what it refuses.
"""

from __future__ import annotations

import ipaddress

from costmodel.core.checks import excerpt
from costmodel.web.api import Views
from costmodel.web.api import routes as api_routes
from costmodel.web.fields import COMMANDS, MAX_QUERY_BYTES, job
from costmodel.web.jobs import Busy, Limits, OverLimit, WorkerPool

#: Names of this machine's loopback address, which a browser on it may use for a server bound there.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
#: Sent with every answer: no other site may frame the page, embed an answer or guess its type; no referrer leaves.
SAFE_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]
#: Seconds a client refused for a full queue is told to wait.
RETRY_AFTER_S = 5


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or name to listen on) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_names(host: str, port: int, allowed=()) -> frozenset[str]:
    """The Host headers a server listening on ``host``:``port`` answers: the address itself, this machine's
    loopback names where it listens there (or everywhere), and ``allowed`` names, each with the port (and without
    it on port 80, as browsers send it)."""
    names = {host if ":" not in host or host.startswith("[") else f"[{host}]", *allowed}
    if is_loopback(host) or host in ("0.0.0.0", "::", ""):
        names |= set(LOOPBACK_NAMES)
    out = {f"{name}:{port}".lower() for name in names}
    return frozenset(out | ({n.lower() for n in names} if port == 80 else set()))


def refusal(scope, hosts: frozenset[str]) -> tuple[int, str] | None:
    """(status, reason) for a request this server does not answer, or None: a Host that is not the server's (DNS
    rebinding) gets 400; a computation asked by another site's page (by ``Sec-Fetch-Site`` or ``Origin``) 403; a
    query longer than its limit 414."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    host = headers.get("host", "")
    if host.lower() not in hosts:
        return 400, (
            f"this server answers requests addressed to {', '.join(sorted(hosts))}, not Host "
            f"{excerpt(host)} (a page of another site may not reach it through its own name)"
        )
    if not scope["path"].startswith(("/api/", "/report/", "/export")):
        return None
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return 403, f"a request from another site's page ({site}) is refused: the page of this server only"
    origin = headers.get("origin")
    if origin is not None and origin.lower() != f"{scope.get('scheme', 'http')}://{host}".lower():
        return 403, f"a request from another origin ({excerpt(origin)}) is refused: the page of this server only"
    if len(scope.get("query_string", b"")) > MAX_QUERY_BYTES:
        return 414, f"a query of more than {MAX_QUERY_BYTES // 1024} kB"
    return None


class Guard:
    """ASGI middleware: answers :func:`refusal`'s status before anything is computed, and adds
    :data:`SAFE_HEADERS` to every answer. (Starlette's TrustedHostMiddleware checks the name and not the port,
    and checks no origin; this does both in one place.)"""

    def __init__(self, application, hosts: frozenset[str]):
        self.application, self.hosts = application, hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.application(scope, receive, send)

        async def send_safe(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SAFE_HEADERS]}
            await send(message)

        problem = refusal(scope, self.hosts)
        if problem is not None:
            from starlette.responses import PlainTextResponse

            return await PlainTextResponse(f"Error: {problem[1]}\n", status_code=problem[0])(scope, receive, send_safe)
        return await self.application(scope, receive, send_safe)


def app(cli, *, host: str = "127.0.0.1", port: int = 8000, allowed_hosts=(), limits: Limits = Limits()):
    """The application over ``cli`` (the command line's group) for a server listening on ``host``:``port``: ``/``
    the page, ``/api/<command>`` JSON, ``/report/<command>`` the HTML page; ``allowed_hosts``: further names it
    is reached by (a machine's name, where it listens beyond loopback); ``limits``: its workers, queue, time and
    memory."""
    import contextlib

    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    from costmodel.core.errors import CostModelError

    pool = WorkerPool(cli, limits)
    views = Views(pool)

    async def answer(request, output: str) -> Response:
        try:
            asked = job(cli, request.path_params["command"], request.query_params.multi_items(), output)
            result = await pool.run(asked, request.is_disconnected)
        except Busy as err:
            return PlainTextResponse(f"Error: {err}\n", status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})
        except OverLimit as err:
            return PlainTextResponse(f"Error: {err}\n", status_code=422)
        except CostModelError as err:
            return PlainTextResponse(f"Error: {err}\n", status_code=400)
        if result is None:  # the client left: nobody reads this
            return Response(status_code=499)
        code, text = result
        if code != 0:
            return PlainTextResponse(
                text if text.startswith("Error:") else f"Error: {text}", status_code=500 if code == 3 else 400
            )
        return Response(text, media_type="application/json") if output == "json" else HTMLResponse(text)

    async def api(request):
        return await answer(request, "json")

    async def report(request):
        return await answer(request, "html")

    async def index(request):
        from costmodel.web.page import render

        return HTMLResponse(render())

    async def missing(request):
        return JSONResponse({"error": f"no such path {excerpt(request.url.path)}"}, status_code=404)

    @contextlib.asynccontextmanager
    async def lifespan(application):
        await run_in_threadpool(pool.warm)
        try:
            yield
        finally:
            pool.close()

    routes = [
        *api_routes(views),
        Route("/", index),
        Route("/api/{command}", api),
        Route("/report/{command}", report),
        Route("/{path:path}", missing),
    ]
    guarded = Guard(Starlette(routes=routes, lifespan=lifespan), host_names(host, port, allowed_hosts))
    guarded.pool = pool
    return guarded


__all__ = ["COMMANDS", "app"]
