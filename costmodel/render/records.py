"""Reports as flat records: CSV and Markdown rows of attention predictions."""

from __future__ import annotations


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)


def flat(records: list[dict]) -> tuple[list[str], list[dict]]:
    """(the columns, the rows) of records as a table takes them: a nested record (a measured range) becomes a column
    per field (``ttft_band_low_s``), a list of words (a command's arguments) one shell-quoted cell; the columns in the order the
    records first give them."""
    import shlex

    rows = []
    for record in records:
        row = {}
        for key, value in record.items():
            if isinstance(value, dict):
                row.update({f"{key}_{sub}": v for sub, v in value.items()})
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                row[key] = shlex.join(value)
            else:
                row[key] = value
        rows.append(row)
    return list(dict.fromkeys(k for row in rows for k in row)), rows


def records_csv(records: list[dict]) -> str:
    """Records as CSV, a column per field (:func:`flat`; numbers in full)."""
    import csv
    import io

    keys, rows = flat(records)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def records_markdown(records: list[dict]) -> str:
    """Records as a markdown table (numbers to 6 significant digits), ready for a design doc."""
    keys, rows = flat(records)
    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
    lines += ["| " + " | ".join(_cell(r.get(k)).replace("|", "\\|") for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def attention_records(hw, comparison) -> list[dict]:
    """Every op of each variant's prediction on one device, and the totals, as rows."""
    out = []
    for p in comparison:
        base = {"device": hw.id, "variant": p.workload.variant, "g": p.workload.g}
        out += [
            {**base, "op": o.name, "flops": o.flops, "bytes": o.bytes, "time_s": o.time_s, "bound": o.bound}
            for o in p.ops
        ]
        out.append(
            {
                **base,
                "op": "total (all layers)",
                "flops": p.total.flops,
                "bytes": p.total.bytes,
                "time_s": p.total.time_s,
                "bound": p.total.bound,
            }
        )
    return out
