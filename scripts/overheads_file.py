"""Writes fitted engine overheads into ``costmodel/engine/overheads.yaml`` (the fit scripts' ``--write``), keeping
the file's header and every value the fit did not produce."""

from __future__ import annotations

from pathlib import Path

import yaml

FILE = Path(__file__).resolve().parents[1] / "costmodel" / "engine" / "overheads.yaml"


def write(engines: dict[str, dict[str, float]], front_ends: dict[str, float] | None = None) -> None:
    """Set ``engines``' fitted values (engine -> name -> seconds) and ``front_ends`` (engine -> seconds)."""
    text = FILE.read_text(encoding="utf-8")
    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    data = yaml.safe_load(text)
    for engine, values in engines.items():
        data["engines"].setdefault(engine, {}).update({k: float(f"{v:.6g}") for k, v in values.items()})
    for engine, value in (front_ends or {}).items():
        data["engine_front_end_s"][engine] = float(f"{value:.6g}")
    body = yaml.safe_dump(data, sort_keys=False, width=116)
    tmp = FILE.with_suffix(".tmp")
    tmp.write_text(header + body, encoding="utf-8")
    tmp.replace(FILE)
    print(f"wrote {FILE}")
