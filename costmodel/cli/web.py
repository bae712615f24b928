"""``costmodel web``: the local page over the library, and its JSON API (:mod:`costmodel.web`). ``costmodel serve``
is its former name, kept for one release with a note."""

from __future__ import annotations

import click

from costmodel.core.errors import CostModelError


def web_options(func):
    """The server's options: where it listens, and the limits on its computations."""
    for option in reversed(OPTIONS):
        func = option(func)
    return func


OPTIONS = [
    click.option(
        "--host",
        default="127.0.0.1",
        show_default=True,
        help="the address to listen on (127.0.0.1: this machine only; the page has no authentication)",
    ),
    click.option(
        "--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="the port to listen on"
    ),
    click.option(
        "--allowed-host",
        "allowed_hosts",
        multiple=True,
        metavar="NAME",
        help="a further name the page is reached by (with --host beyond this machine: its name or address)",
    ),
    click.option(
        "--workers",
        type=click.IntRange(1, 64),
        default=2,
        show_default=True,
        help="computations run at once, each in a process of its own",
    ),
    click.option(
        "--queue",
        type=click.IntRange(0, 1024),
        default=8,
        show_default=True,
        help="requests that wait for a worker; past them a request gets 503 with Retry-After",
    ),
    click.option(
        "--time-limit",
        type=click.FloatRange(0.1, 86400),
        default=120.0,
        show_default=True,
        help="seconds one computation may run before it is cut (the request gets 422)",
    ),
    click.option(
        "--memory-limit",
        type=click.IntRange(64, 1 << 20),
        default=4096,
        show_default=True,
        help="MiB of memory one computation may take beyond a worker's own",
    ),
]


def run_web(host, port, allowed_hosts, workers, queue, time_limit, memory_limit) -> None:
    """Serve the page of the command line this command belongs to until stopped."""
    try:
        import uvicorn

        from costmodel.web.app import app, is_loopback
        from costmodel.web.jobs import Limits
    except ImportError as err:
        raise CostModelError(
            f"costmodel web needs the web extra ({err.name} is not installed): "
            'python -m pip install -e ".[web]" in the checkout'
        ) from None
    limits = Limits(workers=workers, queue=queue, seconds=time_limit, memory_bytes=memory_limit << 20)
    group = click.get_current_context().find_root().command
    application = app(group, host=host, port=port, allowed_hosts=allowed_hosts, limits=limits)
    if not is_loopback(host):
        click.echo(
            f"Warning: listening on {host}, beyond this machine: the page has no authentication, and "
            "anyone who can reach this address and port can use it",
            err=True,
        )
    click.echo(f"costmodel on http://{host}:{port}/ (Ctrl-C stops it)")
    uvicorn.run(application, host=host, port=port, log_level="warning")


@click.command()
@web_options
def web(**options) -> None:
    """A local web page over the library: attention, a model's step, a served run, a load curve, capacity, a plan
    or a recommendation, with interactive charts, results pinned side by side, and the command line that prints the
    same numbers. Its JSON API: POST /api/v1/jobs (or GET /api/v1/view?<field>=<value>), and GET
    /api/<command>?... for the command line's --json. It answers this machine's browser and the page itself only;
    see docs/web.md. Needs the web extra: python -m pip install -e ".[web]" in the checkout.

    Example: costmodel web --port 8000
    """
    run_web(**options)


@click.command()
@web_options
def serve(**options) -> None:
    """The former name of `costmodel web` (this release only): the same page and options, with a note.

    Example: costmodel serve --port 8000
    """
    click.echo("Note: `costmodel serve` is now `costmodel web`; the old name goes in the next release", err=True)
    run_web(**options)
