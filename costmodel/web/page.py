"""The page (``costmodel/web/static/``: its HTML, style and script), filled in: the form's fields from the request's
schema, the shipped devices and presets to choose from, and, for a saved view, the views themselves with plotly.js
inline, so that one file holds a whole comparison and opens offline."""

from __future__ import annotations

import functools
import re
from importlib import resources

from costmodel.render.html import script_json
from costmodel.render.interactive import plotly_js


@functools.cache
def _static(name: str) -> str:
    """A file of ``costmodel/web/static/``, read once."""
    return resources.files("costmodel.web").joinpath("static", name).read_text(encoding="utf-8")


def render(saved: dict | None = None) -> str:
    """The page: served (``saved`` None: plotly.js from ``/static/plotly.min.js``), or one offline file holding
    ``saved`` (``{"current": {"query", "view"}, "pins": [...]}``) with plotly.js inline."""
    from costmodel.hardware.catalog import profile_ids
    from costmodel.model.presets import preset_ids
    from costmodel.web.requests import USES, form

    if saved is None:
        plotly = '<link rel="preload" href="/static/plotly.min.js" as="script">'  # run once the numbers show
    else:
        script = plotly_js()
        plotly = f"<script>{script}</script>" if script else ""
    title = "costmodel" if saved is None else f"costmodel: {saved['current']['view']['title']}"
    values = {
        "title": title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"),
        "style": _static("page.css"),
        "plotly": plotly,
        "form": script_json(form()),
        "choices": script_json({"gpu": profile_ids(), "model": preset_ids()}),
        "uses": script_json({view: sorted(names) for view, names in USES.items()}),
        "saved": script_json(saved),
        "script": _static("page.js"),
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], _static("page.html"))
