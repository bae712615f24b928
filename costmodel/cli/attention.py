"""`costmodel predict` for attention workloads: one prediction per device, or a sweep streamed as it is priced."""

from __future__ import annotations

import click

from costmodel.cli.options import (
    check_writable,
    csv_to_stdout,
    echo_lines,
    emit_json,
    emit_records,
    write_csv,
)
from costmodel.cli.options import (
    sweep_spec as parse_sweep_spec,
)
from costmodel.core.errors import CostModelError
from costmodel.core.files import wrote
from costmodel.core.vocab import DEFAULTS, SWEEP_DIMS


def attention_predict(
    hws: list, chosen: list, one_variant: bool, fmt: str, overlap, timing, without, prompt_write=None, kernels=None
) -> None:
    """``costmodel predict`` of attention workloads: every op of each variant on each device (``prompt_write``: the
    prompt call's cache write held in the call or apart, :data:`costmodel.core.vocab.PROMPT_WRITES`)."""
    from costmodel.attention.roofline import compare

    results = [compare(chosen, hw, overlap, timing, without, prompt_write, kernels) for hw in hws]
    if fmt == "json":
        dumped = [r.model_dump(mode="json") for r in results]
        dumped = [d[0] if one_variant else d for d in dumped]
        emit_json(dumped[0] if len(hws) == 1 else dumped)
    elif fmt in ("csv", "markdown"):
        from costmodel.render.records import attention_records

        emit_records([row for hw, r in zip(hws, results) for row in attention_records(hw, r)], fmt)
    elif len(hws) == 1:
        click.echo(str(results[0]))
    else:
        from costmodel.render.attention import attention_devices_table

        click.echo(attention_devices_table(hws, results))


def attention_sweep(
    hws: list, chosen: list, spec: str, fmt: str, csv_path, overlap, max_points, timing, without
) -> None:
    """``costmodel predict --sweep DIM=RANGE`` of attention workloads: streamed in chunks to a file or standard
    output, or held whole for an aligned table."""
    from costmodel.attention.sweeps import plan_sweep, swept

    name, text = parse_sweep_spec(spec, SWEEP_DIMS)
    if csv_path is not None:
        check_writable(csv_path)
        fmt = csv_to_stdout(csv_path, fmt)
    plans = [plan_sweep(chosen, hw, name, text, overlap, max_points, timing, without) for hw in hws]
    points = len(plans[0].values) * len(chosen) * len(hws)
    if fmt != "table" or (csv_path is not None and points > DEFAULTS["max_points"]):
        # streamed, a chunk at a time: memory does not grow with the points (a table is aligned whole)
        stream_sweep(hws, plans, fmt, csv_path)
        if fmt == "table":
            echo_lines(
                [f"wrote {csv_path} ({points} rows; a table of more than {DEFAULTS['max_points']} rows is not printed)"]
            )
        return
    results = [swept(plan) for plan in plans]
    records = (
        results[0].records
        if len(hws) == 1
        else [{"device": hw.id, **r} for hw, result in zip(hws, results) for r in result.records]
    )
    if csv_path is not None:
        write_csv(csv_path, records)
    if fmt == "table":
        if len(results) == 1:
            click.echo(str(results[0]))
        else:
            from costmodel.render.attention import sweeps_table

            click.echo(sweeps_table(results))
        echo_lines(wrote(csv_path))


def stream_sweep(hws: list, plans: list, fmt: str, csv_path: str | None, each=None) -> None:
    """A sweep's records to the CSV file and to standard output (csv, markdown or json), a chunk at a time;
    ``each(i, chunk)``: also handed every chunk of the i-th device's records (a figure's envelope)."""
    import contextlib
    import csv
    import json

    from costmodel.core.files import atomic_path
    from costmodel.render.records import records_csv, records_markdown

    def chunks():
        for i, (hw, plan) in enumerate(zip(hws, plans)):
            for chunk in plan.chunks():
                if each is not None:
                    each(i, chunk)
                yield [{"device": hw.id, **r} for r in chunk] if len(hws) > 1 else chunk

    with contextlib.ExitStack() as stack:
        writer = None
        if csv_path is not None and csv_path != "-":
            out = stack.enter_context(
                open(stack.enter_context(atomic_path(csv_path)), "w", newline="", encoding="utf-8")
            )
        first = True
        for chunk in chunks():
            if csv_path is not None and csv_path != "-":
                if writer is None:
                    writer = csv.DictWriter(out, fieldnames=list(chunk[0]))
                    writer.writeheader()
                writer.writerows(chunk)
            if fmt == "csv" or csv_path == "-":
                text = records_csv(chunk)
                click.echo(text if first else text.split("\n", 1)[1], nl=False)
            elif fmt == "markdown":
                text = records_markdown(chunk)
                click.echo(text if first else text.split("\n", 2)[2])
            elif fmt == "json":
                try:
                    body = ",\n".join(
                        "\n".join("  " + line for line in json.dumps(r, indent=2, allow_nan=False).splitlines())
                        for r in chunk
                    )
                except ValueError:
                    raise CostModelError(
                        "a result is not finite (a count or time overflowed); use smaller dimensions"
                    ) from None
                click.echo(("[\n" if first else ",\n") + body, nl=False)
            first = False
        if fmt == "json":
            click.echo("\n]")
