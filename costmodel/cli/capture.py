"""One run of a command, kept in every format: within :func:`capturing`, :func:`costmodel.cli.options.emit` also
keeps the table, the JSON and the CSV rows as they would print, so ``--html`` fills its page from the run the user
asked for instead of running the command again for each format."""

from __future__ import annotations

import contextlib

#: The dict :func:`capturing` yields, while it is open.
ON: dict | None = None


@contextlib.contextmanager
def capturing():
    """Within it, the command's emitted output in every format (format -> text) in the dict it yields; empty
    unless the command emitted exactly once (a command that prints through another path keeps nothing)."""
    global ON
    ON = kept = {}
    try:
        yield kept
    finally:
        ON = None
        if kept.pop("calls", 0) != 1:
            kept.clear()


def keep(data, records: list[dict], table) -> dict:
    """Keep ``data`` as ``--json`` prints it, ``records`` as ``--format csv`` does, and the ``table()`` text; what
    is kept (format -> text; JSON that is not finite is not, for printing it is the error)."""
    import json

    from costmodel.render.records import records_csv

    ON["calls"] = ON.get("calls", 0) + 1
    try:
        ON.update(json=json.dumps(data, indent=2, allow_nan=False) + "\n", table=table() + "\n")
        ON["csv"] = records_csv(records) if records else None
    except ValueError:  # not finite: printing it is the error (emit_json's), and no page is written
        ON["calls"] += 1
        return {}
    return ON
