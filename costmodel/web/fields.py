"""What a request to ``costmodel web`` may ask: an allow-list of typed, bounded fields, from which the server
builds the command it runs.

A query's keys are fields, never command-line flags passed through: each key must name an option of the chosen
command that :data:`FIELDS` lists, and its value must parse as that field's type within its bounds (a whole
number, a decimal number, one of a closed set of choices, a bare flag, a shipped device or model id). The command
line the server runs is then written from the parsed values alone, so no output option (``--csv``, ``--html``,
``--plot``), no input file (a lengths file, a profile or config path) and no option hidden in a value can reach it.
A model of one's own is a pasted ``config.json`` text, parsed in memory (:func:`costmodel.model.presets.pasted_config`).
Every bound here is a limit on the work one request can ask for; an error names the field and the rule, and
quotes at most a short excerpt of what was sent.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from costmodel.core.checks import excerpt
from costmodel.core.errors import CostModelError

#: The commands the API answers (each prints ``--json``) and whose ``--html`` page ``/report/`` answers.
COMMANDS = ("predict", "capacity", "plan", "derive")
#: The longest config.json the page takes pasted (a large model's is a few kB).
MAX_CONFIG_BYTES = 32 * 1024
#: The longest query string (a pasted config.json, percent-encoded, fits) and the most fields in one query.
MAX_QUERY_BYTES = 128 * 1024
MAX_FIELDS = 64
#: The longest value of any field but the pasted config (ids, numbers and choices are all far shorter).
MAX_VALUE_CHARS = 128
#: Tokens: a prompt, an output, a context, a token budget. 2^20, past every shipped model's context window.
MAX_TOKENS = 1 << 20
#: Clients, sequences in a batch, requests: more than any served deployment the project has measured (128
#: clients) by a wide margin, few enough that a simulation of them ends within the time limit.
MAX_CLIENTS = 4096
MAX_REQUESTS = 10_000
#: Devices in one layout (tensor, pipeline, expert, data parallel, replicas, workers, GPUs to plan on): 64, the
#: largest layout the planner is asked to search (eight 8-GPU nodes).
MAX_DEVICES = 64
#: Widths and head counts of an attention shape (heads, head and value dimensions, layers): 1024; model widths,
#: latent ranks and batches: 65,536.
MAX_HEADS = 1024
MAX_WIDTH = 65_536
#: Devices compared side by side in one request (``gpu`` repeated).
MAX_GPUS = 8


@dataclass(frozen=True)
class Field:
    """One field the web API takes: its type (``count``: a whole number; ``number``: a decimal; ``choice``: one of
    the command's own closed set; ``flag``; ``gpu``: a shipped profile's id or alias; ``model``: a preset's;
    ``routing``), its bounds (``least`` <= value <= ``most``) and how many times a query may give it."""

    kind: str
    most: float = 0
    least: float = 1
    repeat: int = 1


def _count(most: int, least: int = 1) -> Field:
    return Field("count", most, least)


def _number(most: float, least: float = 0) -> Field:
    return Field("number", most, least)


CHOICE, FLAG = Field("choice"), Field("flag")
#: The allow-list, by the commands' parameter names; a query key may be any long option name of that parameter
#: (``tp`` or ``tensor-parallel-size``). A parameter not listed never goes over the web.
FIELDS: dict[str, Field] = {
    # one attention layer
    "variant": CHOICE,
    "groups": _count(MAX_HEADS),
    "mode": CHOICE,
    "batch": _count(MAX_WIDTH),
    "seq": _count(MAX_TOKENS),
    "context": _count(MAX_TOKENS),
    "d_model": _count(MAX_WIDTH),
    "heads": _count(MAX_HEADS),
    "head_dim": _count(MAX_HEADS),
    "value_dim": _count(MAX_HEADS),
    "dtype": CHOICE,
    "layers": _count(MAX_HEADS),
    "execution": CHOICE,
    "overlap": CHOICE,
    "cache_append": CHOICE,
    "timing": CHOICE,
    "without": Field("choice", repeat=16),
    "kv_rank": _count(MAX_WIDTH),
    "rope_dim": _count(MAX_HEADS),
    "q_rank": _count(MAX_WIDTH),
    "form": CHOICE,
    "q_lora": FLAG,
    "asymptotic": FLAG,
    "as_latex": FLAG,
    # a model and its devices
    "gpus": Field("gpu", repeat=MAX_GPUS),
    "decode_gpu": Field("gpu"),
    "model_name": Field("model"),
    "tp": _count(MAX_DEVICES),
    "kv_heads": _count(MAX_HEADS),
    "weight_dtype": CHOICE,
    "kv_dtype": CHOICE,
    "mla_form": CHOICE,
    "input_len": _count(MAX_TOKENS),
    "output_len": _count(MAX_TOKENS),
    "source": _count(MAX_TOKENS),
    "variants": FLAG,
    "routing": Field("routing"),
    "mxfp4_activations": CHOICE,
    # an engine under load
    "engine_name": CHOICE,
    "concurrency": _count(MAX_CLIENTS),
    "client_connections": _count(MAX_CLIENTS),
    "request_rate": _number(1e6),
    "burstiness": _number(1e3),
    "num_requests": _count(MAX_REQUESTS),
    "warmup_requests": _count(MAX_REQUESTS, 0),
    "max_num_batched_tokens": _count(MAX_TOKENS),
    "max_num_seqs": _count(MAX_CLIENTS),
    "memory_fraction": _number(1),
    "page_size": _count(MAX_HEADS),
    "max_model_len": _count(MAX_TOKENS),
    "chunked_prefill": FLAG,
    "prefix_caching": FLAG,
    "async_scheduling": FLAG,
    "length_dist": CHOICE,
    "spread": Field("number", 0.99, 0),
    "frontend": CHOICE,
    "evaluator": CHOICE,
    # layouts
    "expert_parallel": FLAG,
    "expert_parallel_size": _count(MAX_DEVICES),
    "attention_dp": _count(MAX_DEVICES),
    "replicas": _count(MAX_DEVICES),
    "pipeline_parallel": _count(MAX_DEVICES),
    "disaggregated": FLAG,
    "prefill_tp": _count(MAX_DEVICES),
    "prefill_workers": _count(MAX_DEVICES),
    "prefill_max_num_seqs": _count(MAX_CLIENTS),
    "prefill_expert_parallel": FLAG,
    "prefill_attention_dp": _count(MAX_DEVICES),
    "decode_tp": _count(MAX_DEVICES),
    "decode_workers": _count(MAX_DEVICES),
    "decode_max_num_seqs": _count(MAX_CLIENTS),
    "decode_expert_parallel": FLAG,
    "decode_attention_dp": _count(MAX_DEVICES),
    "kv_link_bandwidth": _number(1e15),
    # targets, capacity and plans
    "tpot_ms": _number(1e7),
    "ttft_ms": _number(1e7),
    "price_per_hour": _number(1e6),
    "batching": CHOICE,
    "load": CHOICE,
    "statistic": CHOICE,
    "minimise": CHOICE,
    "devices": _count(MAX_DEVICES),
    "max_concurrency": _count(MAX_CLIENTS),
}
#: Parameters that name a file or choose the output: the API answers JSON (``/api/``) or the page (``/report/``)
#: and reads and writes no file a request names.
FILES_AND_OUTPUT = ("csv_path", "html_path", "plot_path", "fmt", "as_json", "lengths_file", "model_config")
#: The field a pasted config.json comes in (its text, not a path), and the parameter of the model it stands for.
CONFIG, MODEL = "config", "model_name"

_WHOLE = re.compile(r"[0-9]{1,10}")
_DECIMAL = re.compile(r"[0-9]{1,12}(\.[0-9]{1,12})?([eE][-+]?[0-9]{1,3})?")
_ROUTING = re.compile(r"uniform|balanced|power-law:[0-9]{1,6}(\.[0-9]{1,6})?")


@dataclass(frozen=True)
class Job:
    """A computation a request asks for: the command line's arguments, written from checked fields only, and the
    pasted config.json's text (the model ``--model`` names inside the worker), if any."""

    args: tuple[str, ...]
    config: str | None = None


def job(cli, command: str, query: list[tuple[str, str]], output: str) -> Job:
    """The :class:`Job` a query asks of ``command`` (``output``: ``json`` for ``--json``, ``html`` for the page on
    standard output), built from :data:`FIELDS` alone; :class:`CostModelError` names the first field that breaks a
    rule, and the rule."""
    from costmodel.model.presets import PASTED

    if command not in COMMANDS:
        raise CostModelError(f"unknown command {excerpt(command)}; this answers {', '.join(COMMANDS)}")
    if len(query) > MAX_FIELDS:
        raise CostModelError(f"{len(query):,} fields in one query; at most {MAX_FIELDS}")
    params = _params(cli.commands[command])
    config = _pasted(query)
    args, given = [command], {}
    for key, value in query:
        if key == CONFIG:
            continue
        param = _param(command, params, key)
        given[param.name] = given.get(param.name, 0) + 1
        if given[param.name] > FIELDS[param.name].repeat:
            raise CostModelError(f"field {key!r} is given more than {FIELDS[param.name].repeat} times")
        args += _arguments(param, key, value)
    if config is not None:
        if MODEL in given:
            raise CostModelError("give one model: a preset (model=...) or a pasted config.json (config=...)")
        if MODEL not in params:
            raise CostModelError(f"{command} takes no model, so no pasted config.json")
        args += ["--model", PASTED]
    args += ["--json"] if output == "json" else ["--html", "-"]
    return Job(tuple(args), config)


def _params(command) -> dict[str, object]:
    return {p.name: p for p in command.params}


def _long(param) -> list[str]:
    return [o[2:] for o in [*param.opts, *param.secondary_opts] if o.startswith("--")]


def _param(command: str, params: dict, key: str):
    """The parameter a query key names (any of its long option names), if it goes over the web."""
    param = next((p for p in params.values() if key in _long(p)), None)
    if param is None:
        raise CostModelError(
            f"{command} takes no field {excerpt(key)}; it takes "
            f"{', '.join(sorted(_long(p)[0] for p in params.values() if p.name in FIELDS))}"
        )
    if param.name in FILES_AND_OUTPUT:
        raise CostModelError(
            f"field {key!r} names a file or chooses the output, and does not go over the web: "
            "/api/ answers JSON and /report/ the page"
        )
    if param.name not in FIELDS:
        raise CostModelError(f"field {key!r} does not go over the web (the command line takes it)")
    return param


def _pasted(query) -> str | None:
    texts = [v for k, v in query if k == CONFIG]
    if not texts or not texts[0].strip():
        return None
    if len(texts) > 1:
        raise CostModelError("give one pasted config.json")
    if len(texts[0].encode("utf-8")) > MAX_CONFIG_BYTES:
        raise CostModelError(f"a pasted config.json of more than {MAX_CONFIG_BYTES // 1024} kB")
    return texts[0]


def _arguments(param, key: str, value: str) -> list[str]:
    """The command-line arguments of one checked field (a flag's ``false`` gives none)."""
    field, flag = FIELDS[param.name], f"--{_long(param)[0]}"
    if len(value) > MAX_VALUE_CHARS:
        raise CostModelError(f"field {key!r}: a value of {len(value):,} characters; at most {MAX_VALUE_CHARS}")
    if field.kind == "flag":  # key= and key=true give the flag the key names, key=false its opposite (if any)
        if value not in ("", "true", "false"):
            raise CostModelError(f"field {key!r} is a flag: give it empty, true or false, not {excerpt(value)}")
        if (value == "false") == (f"--{key}" in param.secondary_opts):
            return [flag]
        return param.secondary_opts[:1]
    return [flag, _checked(param, field, key, value)]


def _checked(param, field: Field, key: str, value: str) -> str:
    """``value``, once it is of ``field``'s type and within its bounds (digits, a decimal, a choice or an id: nothing
    the command line could read as an option)."""
    from costmodel.hardware.catalog import is_listed
    from costmodel.model.presets import is_preset

    if field.kind == "count":
        if not _WHOLE.fullmatch(value) or not field.least <= int(value) <= field.most:
            raise CostModelError(
                f"field {key!r}: {excerpt(value)} is not a whole number from {field.least:,} to {int(field.most):,}"
            )
        return value
    if field.kind == "number":
        number = float(value) if _DECIMAL.fullmatch(value) else math.nan
        if not (field.least < number <= field.most or number == field.least == 0):
            raise CostModelError(
                f"field {key!r}: {excerpt(value)} is not a decimal number above {field.least:g} "
                f"and at most {field.most:g}"
            )
        return value
    if field.kind == "choice":
        choices = [str(c) for c in param.type.choices]
        if value not in choices:
            raise CostModelError(f"field {key!r}: {excerpt(value)} is not one of {', '.join(choices)}")
        return value
    if field.kind == "routing":
        if not _ROUTING.fullmatch(value):
            raise CostModelError(f"field {key!r}: {excerpt(value)} is not uniform, balanced or power-law:ALPHA")
        return value
    known = is_listed(value) if field.kind == "gpu" else is_preset(value)
    if not known:
        what = (
            "a shipped profile's id or alias (`costmodel hardware list`)"
            if field.kind == "gpu"
            else "a preset's id or alias (a model of one's own is a pasted config.json, config=<its text>)"
        )
        raise CostModelError(f"field {key!r}: {excerpt(value)} is not {what}; over the web it is never a path")
    return value
