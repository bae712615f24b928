"""A model served by an engine under load: what a benchmark client measures (TTFT, TPOT, inter-token latency,
end-to-end; mean, median, p90, p99), the throughput, the batch the engine reached, its KV use and where the
time went. :func:`serve` sets the engine up on the device (KV capacity in pages, as the engine computes it)
and runs the iteration-level simulation (:mod:`costmodel.engine.simulate`) or the steady-state closed form
(:mod:`costmodel.engine.steady`).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np

from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.core.memo import per_object
from costmodel.core.vocab import DEFAULTS
from costmodel.engine.config import (
    HOST_COSTS_OF,
    EngineConfig,
    EngineFlags,
    activation_bytes,
    default_kv_dtype,
    engine,
    kv_budget_bytes,
    kv_capacity_tokens,
)
from costmodel.engine.iteration import IterationTable
from costmodel.engine.layout import Layout
from costmodel.engine.limits import model_len
from costmodel.engine.load import Load, checked_load, engine_share, mean_length
from costmodel.engine.report_lines import kernels_line
from costmodel.engine.reports import LoadPrediction, report_of
from costmodel.hardware.power import with_limit
from costmodel.hardware.profile import HardwareProfile
from costmodel.model.assumptions import step_assumptions as model_assumptions
from costmodel.model.memory import kv_bytes, weight_bytes
from costmodel.model.presets import ModelPreset
from costmodel.model.pricing import Pricing, pricing

# --- fitted engine overheads -------------------------------------------------------------------------


def _fitted() -> dict:
    """``costmodel/engine/overheads.yaml``: the fits, their data and method (written by scripts/fit_serving.py and
    scripts/fit_host_time.py)."""
    from importlib import resources

    from costmodel.core.files import safe_yaml

    text = resources.files("costmodel.engine").joinpath("overheads.yaml").read_text(encoding="utf-8")
    return safe_yaml(text)


_FITTED = _fitted()
#: A serving engine's fixed costs on top of the GPU's work, by engine: per iteration (``iteration_s``), per
#: request behind Dynamo's frontend (``request_s``, added to TTFT) and TensorRT-LLM's host time per layer
#: (``layer_s``, ``layer_seq_s``: Setup.host_s). Fitted on aiconfigurator's H100 silicon sample; the fits' data and
#: method: ``costmodel/engine/overheads.yaml``; their errors on rows they did not see: docs/serving.md.
OVERHEADS: dict[str, dict[str, float]] = _FITTED["engines"]


def overheads_of(engine_name: str) -> dict[str, float]:
    """An engine's fitted fixed costs (:data:`OVERHEADS`), or those of the engine it takes them from
    (:data:`HOST_COSTS_OF`)."""
    return OVERHEADS[HOST_COSTS_OF.get(engine_name, engine_name)]


#: The front ends a request can pass before the engine: ``dynamo`` (Dynamo's frontend and router, as
#: aiconfigurator's collection deploys every engine; the front-end latencies of :data:`OVERHEADS` were fitted on
#: those rows) or ``engine`` (the engine's own OpenAI server, as InferenceX's recipes start it: ``vllm serve``,
#: ``sglang.launch_server``, ``trtllm-serve``).
FRONTENDS = ("dynamo", "engine")
#: The engine's own server's front-end latency where it was measured apart from Dynamo's (overheads.yaml); the
#: other engines' own servers take Dynamo's value (stated in the assumptions).
ENGINE_FRONT_END_S: dict[str, float] = _FITTED["engine_front_end_s"]


def front_end(engine_name: str, frontend: str = "dynamo") -> tuple[float, str]:
    """The front end's latency of ``engine_name`` behind ``frontend`` (:data:`FRONTENDS`) and how it was found."""
    from costmodel.core.vocab import choice

    frontend = choice("frontend", frontend, FRONTENDS)
    dynamo = overheads_of(engine_name)["request_s"]
    if frontend == "dynamo":
        return dynamo, "Dynamo's frontend, fitted on Dynamo-launched deployments"
    if engine_name in ENGINE_FRONT_END_S:
        return ENGINE_FRONT_END_S[engine_name], "the engine's own server, fitted on its own deployments"
    return dynamo, "the engine's own server, not measured apart from Dynamo's: Dynamo's value"


class NoRoomForOneRequest(CostModelError):
    """The weights leave the engine a KV cache smaller than one request."""


_TABLES: dict = {}


def pricing_key(pr: Pricing) -> tuple:
    """Every field of a pricing as hashable values (the device as its JSON, the time model as its timing and
    mechanisms): two pricings with the same key price every op alike."""
    import dataclasses

    out = []
    for f in dataclasses.fields(pr):
        v = getattr(pr, f.name)
        if f.name == "hw":
            v = _profile_json(v)
        elif f.name == "model":
            v = (v.timing, tuple(sorted(v.on)))
        out.append(v)
    return tuple(out)


#: id of a profile -> (the profile, its JSON): profiles are frozen, and a served run asks for its key twice.
_JSON: dict = {}


def _profile_json(hw) -> str:
    return per_object(_JSON, hw, None, hw.model_dump_json)


def iteration_table(m: ModelPreset, pr: Pricing, max_tokens: int, max_seqs: int, max_context: int) -> IterationTable:
    """The iteration table of a model on a device, kept for the process: its grids reach the next power of two
    of the sequences and the context, so runs that differ only in load share one."""
    seqs, ctx = 1 << (max_seqs - 1).bit_length(), 1 << (max_context - 1).bit_length()
    key = (m.model_dump_json(), pricing_key(pr), max_tokens)
    have = _TABLES.get(key)
    if have is None or have.d_grid[-1] < seqs or have.c_grid[-1] < ctx:
        if len(_TABLES) > 64:
            _TABLES.clear()
        _TABLES[key] = IterationTable(m, pr, max_tokens=max_tokens, max_seqs=seqs, max_context=ctx)
    return _TABLES[key]


def kv_room(m: ModelPreset, pr: Pricing, eng: EngineConfig) -> tuple[float, float, float, int]:
    """(weight bytes, KV bytes per token, KV budget bytes, KV tokens) of one device of ``pr``'s layout: what the
    engine's memory fraction leaves for the cache after the weights and activations. A pipeline stage holds 1/pp of
    the layers' weights and of every token's cache (the embeddings and head spread evenly with them: an estimate for
    the first and last stages)."""
    dev = pr.slice(m)
    weights = weight_bytes(dev, pr) / pr.pp
    big = 1 << 16
    per_token = (kv_bytes(dev, pr, 1, big, 1) - kv_bytes(dev, pr, 1, 0, 1)) / big / pr.pp
    act = activation_bytes(eng.max_num_batched_tokens, m.d_model, dev.d_ff, pr.precision.act)
    budget = kv_budget_bytes(eng, pr.hw.engine_memory, weights, act)
    return weights, per_token, budget, kv_capacity_tokens(eng, budget, per_token)


def _smallest_tp(m: ModelPreset, pr: Pricing, eng: EngineConfig, max_context: int) -> int | None:
    """The smallest power-of-two tensor-parallel size above ``pr``'s, up to 64, whose devices hold the weights and one
    request's KV cache (the model's heads and experts divided as :func:`costmodel.model.ops.device_slice` allows);
    None where none does."""
    tp = pr.tp * 2
    while tp <= 64:
        try:
            if kv_room(m, dataclasses.replace(pr, tp=tp), eng)[3] >= max_context:
                return tp
        except CostModelError:  # a size the model's heads or experts do not divide by
            pass
        tp *= 2
    return None


class Setup:
    """A model, a device (or tp devices) and an engine, made ready to run load: the pricing, the engine's KV
    capacity and the iteration table."""

    def __init__(
        self,
        m: ModelPreset,
        pr: Pricing,
        eng: EngineConfig,
        *,
        max_context: int,
        overheads: dict | None = None,
        replicas: int = 1,
        frontend: str = "dynamo",
        speculation=None,
        price_per_gpu_hour: float | None = None,
    ):
        self.m, self.pr, self.eng = m, pr, eng
        self.price_per_gpu_hour = price_per_gpu_hour  # USD per device-hour: the report's dollars (None: none)
        self.replicas = replicas  # copies of the deployment sharing the load, one evaluated
        self.weights, self.kv_per_token, self.kv_budget, self.kv_tokens = kv_room(m, pr, eng)
        draft = _draft(speculation, pr, eng, self)
        if self.kv_tokens < max_context:
            fits = _smallest_tp(m, pr, eng, max_context)
            raise NoRoomForOneRequest(
                f"{m.id} on {pr.tp * pr.pp} x {pr.hw.id} under {eng.name}: weights {self.weights / 1e9:.1f} GB per device "
                f"leave a KV cache of {max(self.kv_tokens, 0):,} tokens, less than one request's {max_context:,}; "
                + (
                    f"raise tp (tp {fits} holds one) or the memory fraction"
                    if fits
                    else "raise tp or the memory fraction"
                )
            )
        # the table reaches as many sequences as the engine can run, whatever this load asks, so that loads on
        # the same setup share it
        seqs = max(1, min(eng.max_num_seqs, self.kv_tokens // max(1, min(max_context, 512))))
        self.table = iteration_table(m, pr, eng.max_num_batched_tokens, seqs, max_context)
        self.drafting = None
        if speculation is not None:
            from costmodel.engine.speculation import Drafting

            draft_table = draft and iteration_table(draft[0], draft[1], eng.max_num_batched_tokens, seqs, max_context)
            self.drafting = Drafting(speculation, self.table, m.layers, draft_table or None)
        # the time model, the parallel layout and the experts' routing, as a model prediction states them
        self.pr_lines = [
            line
            for line in model_assumptions(m, pr)
            if line.startswith(
                ("time = ", "tensor parallel", "attention data parallel", "mixture of experts", "pipeline parallel")
            )
        ]
        self.pr_lines += kernels_line(pr, eng)
        o = overheads if overheads is not None else overheads_of(eng.name)
        self.iteration_s = float(o["iteration_s"])
        self.request_s, self.front_end_how = (
            front_end(eng.name, frontend) if overheads is None else (float(o["request_s"]), "as given")
        )
        self.layer_s, self.layer_seq_s = float(o.get("layer_s", 0.0)), float(o.get("layer_seq_s", 0.0))
        self.layers = m.layers / pr.pp  # a pipeline stage's process runs its own layers

    def host_s(self, sequences):
        """The host's time for one iteration of ``sequences`` running sequences (an array of counts gives an
        array): per layer a fixed part and a part per sequence (:data:`OVERHEADS`, ``layer_s`` and
        ``layer_seq_s``)."""
        return self.layers * (self.layer_s + self.layer_seq_s * np.asarray(sequences, float))

    def host_line(self) -> str:
        """The host's time per iteration as an assumption states it ("" where the engine has none fitted)."""
        if not (self.layer_s or self.layer_seq_s):
            return ""
        how = (
            "which the overlap scheduler runs beside the GPU's work (the iteration takes the longer)"
            if self.eng.async_scheduling
            else "before the GPU's work"
        )
        return (
            f"; the host's time per iteration, {self.layers:g} layers x ({self.layer_s * 1e3:.3f} ms + "
            f"{self.layer_seq_s * 1e6:.2f} µs per running sequence), {how}"
        )

    def wall(self, gpu, sequences):
        """An iteration's time from its GPU work (seconds, or an array of them) and its running sequences: the
        work plus the engine's fixed cost per iteration, and the host's time (:meth:`host_s`), which an overlap
        scheduler runs beside the GPU's (the iteration takes the longer) and any other scheduler before it."""
        if isinstance(gpu, float) and not (self.layer_s or self.layer_seq_s):  # one iteration, no host time
            return gpu + self.iteration_s
        t = np.asarray(gpu, float) + self.iteration_s
        if self.layer_s or self.layer_seq_s:
            host = self.host_s(sequences)
            t = np.maximum(t, host) if self.eng.async_scheduling else t + host
        return t if np.ndim(t) else float(t)


def _draft(speculation, pr: Pricing, eng: EngineConfig, setup: Setup):
    """A draft model's (model, pricing) on the target's devices, its weights and KV cache taken from the target's
    KV budget (``setup``'s KV tokens lowered to what both caches hold per token); None for any other proposer."""
    if speculation is None or speculation.method != "draft":
        return None
    from costmodel.model.presets import load_model

    dm = load_model(speculation.draft_model)
    dp = pricing(dm, pr.hw, tp=pr.tp, **eng.kernels)  # the target's devices, engine kernels and time model
    weights, per_token, _, _ = kv_room(dm, dp, eng)
    setup.weights += weights
    setup.kv_budget -= weights
    setup.kv_per_token += per_token
    setup.kv_tokens = kv_capacity_tokens(eng, max(setup.kv_budget, 0), setup.kv_per_token)
    return dm, dp


@lru_cache(maxsize=64)
def checkpoint_kv_dtype(m: ModelPreset, engine_name: str, weight_dtype: str | None) -> str | None:
    """The KV-cache dtype an engine keeps for ``m`` with ``weight_dtype`` weights (the checkpoint's where None):
    :func:`costmodel.engine.config.default_kv_dtype`."""
    quant = m.quantization.weight_dtype if m.quantization is not None else None
    return default_kv_dtype(engine_name, weight_dtype or quant)


def serve(
    m: ModelPreset,
    hw: HardwareProfile,
    load: Load,
    *,
    layout: Layout = Layout(),
    engine_name: str = DEFAULTS["engine"],
    flags: EngineFlags = EngineFlags(),
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    timing: str = "graph",
    evaluator: str = "simulation",
    overheads: dict | None = None,
    frontend: str = "dynamo",
    speculation=None,
    timeline: bool = False,
    price_per_gpu_hour: float | None = None,
    power_limit_w: float | None = None,
) -> LoadPrediction:
    """``load``'s requests served by ``engine_name`` (its ``flags`` set, the others its defaults for the device) on
    ``hw`` placed as ``layout`` (aggregated). With ``attention_dp`` groups of ``tp`` devices (attention data
    parallel, experts spread over all of them), each group is an engine with an even share of the clients (or of the
    rate) and of the requests; one is simulated and the report counts all. ``replicas`` copies of the whole
    deployment behind a router (data parallel) share the load the same way. A client with fewer
    ``client_connections`` than clients keeps the others' requests waiting, their clock running (an aiohttp client
    holds 100 unless told otherwise, aiohttp.TCPConnector's ``limit``: gpustack/gpustack PR 2324, "TTFT degrades when
    concurrency > 100"; ai-dynamo/aiperf PR 282 made aiperf's settable, AIPERF_HTTP_CONNECTION_LIMIT).
    ``evaluator``: "simulation" (:mod:`costmodel.engine.simulate`) or "steady-state" (:mod:`costmodel.engine.steady`).
    ``frontend``: the front end the requests pass, whose latency is added to TTFT (:data:`FRONTENDS`).
    ``speculation``: speculative decoding (:class:`costmodel.engine.speculation.Speculation`), simulated.
    ``timeline``: keep a simulated run's iterations (the page's chart). ``price_per_gpu_hour``: one device-hour's
    price; ``power_limit_w``: the boards' power limit (nvidia-smi -pl)."""
    if evaluator not in ("simulation", "steady-state"):
        raise CostModelError(f"unknown evaluator {evaluator!r}; known: simulation, steady-state")
    checks.instance("layout", layout, Layout, "a Layout(tp=..., ...)")
    checks.instance("flags", flags, EngineFlags, "EngineFlags(max_num_seqs=..., ...)")
    if layout.mode != "agg":
        raise CostModelError("serve() places a model aggregated; a disaggregated layout goes to serve_disaggregated()")
    hw = with_limit(hw, power_limit_w)
    price = checks.number("price_per_gpu_hour", price_per_gpu_hour, optional=True)  # USD
    n = checked_load(m, hw, load)
    load, n = engine_share(load, n, layout)
    n = -(-n // load.turns) * load.turns  # whole conversations
    tp = layout.tp
    eng = engine(
        engine_name, capacity_bytes=hw.engine_memory, device_name=hw.name, tp=tp, version=flags.engine_version
    ).with_flags(**flags.settings())
    kv_dtype = kv_dtype or checkpoint_kv_dtype(m, engine_name, weight_dtype)
    pr = pricing(
        m,
        hw,
        tp=tp,
        timing=timing,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        expert_parallel=layout.expert_parallel,
        attention_dp=layout.attention_dp,
        pipeline_parallel=layout.pipeline_parallel,
        expert_parallel_size=layout.expert_parallel_size,
        **eng.kernels,
    )
    prompts, outputs = load.lengths(n + load.warmup_requests)
    prompts, prefix = load.conversations(prompts, outputs)  # a turn's prompt holds its conversation so far
    max_ctx = int(prompts.max() + outputs.max())
    if evaluator != "simulation" and (speculation is not None or load.reuses_cache):
        raise CostModelError("speculative decoding, a shared prefix and conversations need the simulation evaluator")
    setup = Setup(
        m,
        pr,
        eng,
        max_context=max_ctx,
        overheads=overheads,
        replicas=layout.replicas,
        frontend=frontend,
        speculation=speculation,
        price_per_gpu_hour=price,
    )
    model_len(eng, setup, prompts, outputs)
    return _run(setup, load, n, prompts, outputs, evaluator, prefix, timeline)


def _run(
    setup: Setup, load: Load, n: int, prompts, outputs, evaluator: str, prefix=None, timeline: bool = False
) -> LoadPrediction:
    """One engine's share of the load through the closed form or the simulation."""
    concurrency, request_rate, burstiness = load.concurrency, load.request_rate, load.burstiness
    # a client with fewer connections than clients keeps the others' requests waiting: the engine sees a closed
    # loop of as many requests as connections (None: every client's request in flight)
    conn = load.client_connections
    in_flight = conn if conn and conn < concurrency else None
    if evaluator == "steady-state":
        from costmodel.engine.steady import steady_state

        return steady_state(
            setup,
            concurrency=concurrency,
            request_rate=request_rate,
            input_len=mean_length(prompts),
            output_len=mean_length(outputs),
            num_requests=n,
            in_flight=in_flight,
            burstiness=burstiness,
        )
    from costmodel.engine.simulate import client_queue, simulate

    res = simulate(
        setup.table,
        setup.eng,
        kv_tokens=setup.kv_tokens,
        prompts=prompts,
        outputs=outputs,
        concurrency=in_flight or concurrency,
        request_rate=request_rate,
        burstiness=burstiness,
        wall=setup.wall,
        seed=load.seed,
        spec=setup.drafting,
        prefix=prefix,
    )
    if in_flight is not None:
        res = client_queue(res, concurrency)
    most = None
    if request_rate is not None:  # an open loop: the most the engine completes, to say whether it keeps up
        from costmodel.engine.steady import saturation

        most = saturation(setup, input_len=mean_length(prompts), output_len=mean_length(outputs))
    return report_of(
        setup,
        res,
        concurrency,
        request_rate,
        prompts,
        outputs,
        load.warmup_requests,
        in_flight,
        most,
        burstiness,
        goodput=load.goodput,
        ps=load.percentiles,
        timeline=timeline,
    )
