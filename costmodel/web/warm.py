"""Imported once by the workers' fork server (:class:`costmodel.web.jobs.WorkerPool`): prices one small step and one
small served run, so that the tables every view reads (profiles, presets, fitted kernel and engine parameters,
compiled counts) are loaded before any worker is forked, and every worker starts with them."""

from __future__ import annotations

from costmodel.web.requests import ViewRequest
from costmodel.web.views import compute

for _request in ({"view": "step", "batch": 1, "context": 16}, {"concurrency": [1], "input-len": 16, "output-len": 4}):
    compute(ViewRequest.model_validate(_request))
