"""costmodel: exact FLOP and memory costs of MHA, GQA, MQA and MLA, and what they cost on an accelerator.

The public API, imported lazily (``import costmodel`` loads neither sympy nor numpy)::

    import costmodel
    p = costmodel.predict_model(costmodel.load_model("llama-3-8b"), costmodel.load_profile("h100"))
    print(p)                      # the table; p.model_dump() is the JSON

Reports are frozen, typed objects: ``str()`` is the table and ``model_dump()`` the JSON.
"""

from __future__ import annotations

import importlib

from costmodel.core.errors import CostModelError

#: public name -> the module that defines it
_API = {
    "derive": "costmodel.counts.exact",  # exact symbolic counts of an attention program
    "CostReport": "costmodel.counts.exact",
    "analyze": "costmodel.counts.asymptotic",  # Θ forms under the paper's assumptions
    "Workload": "costmodel.attention.workload",  # one attention workload, every dimension a number
    "workloads": "costmodel.attention.workload",  # MHA, GQA and MQA versions of one workload
    "predict": "costmodel.attention.roofline",  # roofline latency of a workload on a device
    "compare": "costmodel.attention.roofline",
    "Prediction": "costmodel.attention.roofline",
    "Comparison": "costmodel.attention.roofline",
    "sweep": "costmodel.attention.sweeps",  # predictions over a range of one parameter
    "Sweep": "costmodel.attention.sweeps",
    "load_profile": "costmodel.hardware.catalog",  # a device by id, alias or YAML path
    "profile_for_device": "costmodel.hardware.catalog",
    "HardwareProfile": "costmodel.hardware.profile",
    "load_model": "costmodel.model.presets",  # a model by preset id or config.json path
    "ModelPreset": "costmodel.model.presets",
    "predict_model": "costmodel.model.step",  # a whole model's decode step, prefill and memory
    "ModelPrediction": "costmodel.model.step",
    "build_program": "costmodel.counts.program",
    "build_mla_program": "costmodel.counts.mla",  # multi-head latent attention, naive or absorbed
    "request": "costmodel.model.requests",  # a request's TTFT, every TPOT, end-to-end latency
    "RequestPrediction": "costmodel.model.requests",
    "largest_batch": "costmodel.model.requests",  # the largest batch under latency targets and memory
    "capacity": "costmodel.model.requests",
    "CapacityReport": "costmodel.model.requests",
    "serve": "costmodel.engine.served",  # a served model under load: continuous batching in an engine
    "LoadPrediction": "costmodel.engine.reports",
    "Load": "costmodel.engine.load",  # what a benchmark client sends: lengths, clients or a rate, warm-up
    "Layout": "costmodel.engine.layout",  # where the engines sit: tp, pp, ep, attention dp, replicas
    "EngineFlags": "costmodel.engine.config",  # the engine settings a user sets (None: the engine's default)
    "load_capacity": "costmodel.deploy.capacity",  # the most clients, or the highest rate, under targets
    "LoadCapacityReport": "costmodel.deploy.capacity",
    "serve_disaggregated": "costmodel.deploy.disagg",  # prefill and decode pools, the KV cache moving between them
    "Pool": "costmodel.deploy.pools",
    "DisaggPrediction": "costmodel.deploy.disagg",
    "plan": "costmodel.deploy.planner",  # every layout on N devices, the front and the best
    "Plan": "costmodel.deploy.planner",
}

__all__ = ["CostModelError", *_API]
__version__ = "0.1.0"


def _join_checkout() -> None:
    """Installed, the package holds hardware_profiles/, model_presets/ and validation/ (pyproject.toml maps the
    checkout's top-level folders in). Imported from a checkout's own folder instead (Python run in the checkout's
    root puts it before any installed copy), those subpackages are the top-level folders beside this one: the
    checkout's root joins the package's path, so the source tree finds its data whether it was installed
    editable, installed as a copy, or not at all."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    if (
        os.path.isfile(os.path.join(root, "pyproject.toml"))
        and os.path.isdir(os.path.join(root, "hardware_profiles"))
        and not os.path.isdir(os.path.join(here, "hardware_profiles"))
        and root not in __path__
    ):
        __path__.append(root)


_join_checkout()


def __getattr__(name: str):
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'costmodel' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
