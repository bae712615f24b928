"""What the page shows for one :class:`~costmodel.web.requests.ViewRequest`: the library's report, computed once,
with the figures (:mod:`costmodel.render.interactive`), the tables (their units in the headers), the few numbers a
comparison lines up, and the command line that prints the same numbers.

:func:`compute` calls the public Python API (``predict_model``, ``serve``, ``plan``, ``recommend``) with the
request's typed values, as the command line calls it with its options; nothing here parses printed text.
"""

from __future__ import annotations

import contextlib

from costmodel.web.requests import ViewRequest


def compute(req: ViewRequest, progress=None) -> dict:
    """The view ``req`` asks for: ``{"view", "title", "command", "summary", "tables", "charts", "report"}``;
    ``progress(done, total, what)`` is told of a long computation's steps."""
    from costmodel.core.progress import listen
    from costmodel.hardware.catalog import load_profile
    from costmodel.model.presets import load_model, pasted_config

    with contextlib.ExitStack() as stack:
        name = req.model
        if req.config is not None:
            name = stack.enter_context(pasted_config(req.config))
        if progress is not None:
            stack.enter_context(listen(progress))
        m = None if req.view in ("attention", "derive") else load_model(name)
        hws = [load_profile(g) for g in req.gpu]
        out = _views()[req.view](req, m, hws)
    return out | {"view": req.view, "command": req.command(), "request": req.used()}


def _views() -> dict:
    """View name -> the function that builds it (:mod:`.views_layer`, :mod:`.views_served`, :mod:`.views_deploy`)."""
    from costmodel.web.views_deploy import capacity_view, plan_view, recommend_view
    from costmodel.web.views_layer import attention_view, derive_view, step_view, variants_view
    from costmodel.web.views_served import curve_view, served_view

    return {
        "attention": attention_view,
        "derive": derive_view,
        "step": step_view,
        "variants": variants_view,
        "served": served_view,
        "curve": curve_view,
        "capacity": capacity_view,
        "plan": plan_view,
        "recommend": recommend_view,
    }
