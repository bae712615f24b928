"""``--html FILE`` for a command that prints a table and ``--json``: the command runs once, as asked, and writes one
self-contained page of the same prediction (:mod:`costmodel.render.html`) from its own table, JSON and CSV, all kept
from that one run (:mod:`costmodel.cli.capture`); a command that prints through another path (derive)
fills the others from quiet runs of the same call."""

from __future__ import annotations

import functools

import click

from costmodel.cli.capture import capturing
from costmodel.cli.options import FilePath, check_writable, command_line, echo_lines, output_format
from costmodel.core.errors import CostModelError

#: Beside a model's attention layouts side by side (``--variants``), the page of their Θ forms: MLA's, with MHA's,
#: GQA's and MQA's beside it.
THETA_FORMS = (
    "Their Θ forms",
    "memory traffic per arithmetic operation of MHA, GQA, MQA and MLA over n decode "
    "steps, under the paper's assumptions",
    ["derive", "--variant", "mla", "--mode", "generate", "--asymptotic"],
)


def html_option(refuse: dict | None = None, silent: tuple[str, ...] = ()):
    """Give a command (with ``fmt`` and ``as_json`` parameters) an ``--html FILE`` option. ``refuse``: parameter ->
    flag that cannot go with it (the page holds one prediction); ``silent``: parameters (files the command writes)
    left out of the runs that fill the page."""

    def decorate(func):
        @click.option(
            "--html",
            "html_path",
            type=FilePath(),
            help="also write one self-contained HTML file: the command, its charts, table and JSON (opens offline)",
        )
        @functools.wraps(func)
        def wrapper(html_path, **params):
            if html_path is None:
                return func(**params)
            check_html_name(html_path, stdout=True)
            check_writable(html_path)
            for name, flag in (refuse or {}).items():
                if params.get(name) is not None:
                    raise CostModelError(f"--html writes one prediction, not {flag}")
            shown = {}
            if html_path != "-":  # on standard output the page is all that is printed
                fmt = output_format(params["fmt"], params["as_json"])
                if fmt in ("table", "json") and all(params.get(name) is None for name in silent):
                    with capturing() as kept:
                        shown[fmt] = _captured(func, params)  # what the user sees is also what the page holds
                    click.echo(shown[fmt], nl=False)
                    shown = kept | shown  # the other formats of the same run, where the command emitted once
                else:
                    func(**params)
            _write(func, html_path, params | {name: None for name in silent}, shown)

        return wrapper

    return decorate


def check_html_name(path: str, *, stdout: bool = False) -> None:
    """An ``--html`` file's name ends in .html or .htm (or is - for standard output, where ``stdout``)."""
    if stdout and path == "-":
        return
    if not path.lower().endswith((".html", ".htm")):
        raise CostModelError(
            f"--html {path!r}: the file must end in .html or .htm"
            + (" (or be - for standard output)" if stdout else "")
        )


def _captured(func, params: dict) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        func(**params)
    return buf.getvalue()


def _write(func, path: str, params: dict, shown: dict[str, str]) -> None:
    """The page, from the command's table, JSON and CSV rows: those in ``shown`` (format -> printed text) as already
    printed, the others from quiet runs."""
    import json

    from costmodel.core.files import write_text, wrote
    from costmodel.render.html import page

    ctx = click.get_current_context()
    if not ("table" in shown and "json" in shown):  # one quiet run, kept in every format where it emits once
        with capturing() as kept:
            printed = _captured(func, params | {"fmt": "table", "as_json": False})
        shown = {"table": printed} | kept | shown
    table, dumped = (
        shown.get(fmt) or _captured(func, params | {"fmt": fmt, "as_json": False}) for fmt in ("table", "json")
    )
    if "csv" in shown:
        csv = shown["csv"]
    else:
        try:  # the table's rows as `--format csv` prints them, where the command has them
            csv = _captured(func, params | {"fmt": "csv", "as_json": False})
        except CostModelError:
            csv = None
    data = json.loads(dumped)
    argv = command_line(ctx, skip=("html_path", "fmt", "as_json"))
    title = next((line for line in table.splitlines() if line.strip()), f"costmodel {ctx.info_name}")
    related = [THETA_FORMS] if "--variants" in argv else []
    write_text(path, page(title, [ctx.info_name, *argv], table, data, csv, related))
    if path != "-":
        echo_lines(wrote(path))
