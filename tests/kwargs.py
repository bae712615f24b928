"""Tests build loads from shared keyword dicts (one base load, one field varied per case): :func:`split` sorts
such keywords into the typed objects ``serve`` and ``serve_disaggregated`` take."""

from __future__ import annotations

from dataclasses import fields

from costmodel.engine.config import EngineFlags
from costmodel.engine.layout import Layout
from costmodel.engine.load import Load


def split(**kw) -> dict:
    """``kw`` as ``load=Load(...)``, ``layout=Layout(...)``, ``flags=EngineFlags(...)`` and the rest as given."""
    out: dict = {}
    for cls, key in ((Load, "load"), (Layout, "layout"), (EngineFlags, "flags")):
        names = {f.name for f in fields(cls)} - {"mode"}
        mine = {k: kw.pop(k) for k in list(kw) if k in names}
        if mine or cls is Load:
            out[key] = cls(**mine)
    return out | kw
