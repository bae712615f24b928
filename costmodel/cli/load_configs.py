"""The configurations one served prediction or load curve compares (comma lists of --tp, --engine and the dtypes,
several --gpu), each set up as :func:`costmodel.engine.served.serve` takes it and priced at every load, over
every core; its launch commands and its plot."""

from __future__ import annotations

from costmodel.core.vocab import DEFAULTS


def draw_curve(results: list, path) -> None:
    """The load curve's figure (:func:`costmodel.render.serving_plots.draw_load_curve`) written to ``path``."""
    from costmodel.render.plots import check_output, save
    from costmodel.render.serving_plots import draw_load_curve

    check_output(path)
    dumped = [r.model_dump(mode="json") for r in results]
    save(draw_load_curve(dumped), path, data={"points": dumped})


def engine_setup(load: dict, pricing: dict):
    """(Layout, EngineFlags, serve()'s other arguments) from the load options and the pricing conventions."""
    from costmodel.engine.config import EngineFlags
    from costmodel.engine.layout import Layout
    from costmodel.engine.speculation import parse

    layout = Layout(
        tp=pricing["tp"],
        expert_parallel=load["expert_parallel"],
        attention_dp=load["attention_dp"] or 1,
        pipeline_parallel=load["pipeline_parallel"] or 1,
        replicas=load["replicas"] or 1,
        expert_parallel_size=load["expert_parallel_size"],
    )
    flags = EngineFlags(**{k: load[k] for k in EngineFlags.__dataclass_fields__})
    kw = dict(
        engine_name=load["engine_name"] or DEFAULTS["engine"],
        weight_dtype=pricing.get("weight_dtype"),
        kv_dtype=pricing.get("kv_dtype"),
        timing=pricing.get("timing", "graph"),
        evaluator=load["evaluator"],
        frontend=load["frontend"],
        speculation=parse(load["speculative_config"], load["acceptance_length"], load["acceptance_rates"]),
        power_limit_w=load["power_limit"],
        price_per_gpu_hour=load["price_per_gpu_hour"],
    )
    return layout, flags, kw


def launch_lines(m, p, layout, flags, kw: dict) -> dict:
    """The launch command of one replica of prediction ``p`` and the benchmark command that would measure it."""
    from costmodel.deploy.launch import commands_for
    from costmodel.hardware.catalog import load_profile

    share = dict(concurrency=p.concurrency) if p.concurrency is not None else dict(request_rate=p.request_rate)
    share["num_requests"] = p.num_requests
    return commands_for(m, load_profile(p.hardware.id), layout, p, flags, kw["weight_dtype"], kw["kv_dtype"], share)


def serve_point(task):
    from costmodel.engine.served import serve

    m, hw, point, layout, flags, kw = task
    return serve(m, hw, point, layout=layout, flags=flags, **kw)


def serve_all(hws, layouts, loads, requests, configs: list, deadline=None) -> tuple[list, list]:
    """Every configuration (``configs``: (Layout, EngineFlags, serve()'s other arguments) each), device, model
    layout and load point served, over every core when there are several (the points past saturation, whose queues
    hold thousands of requests, first), a progress bar on a terminal; (the predictions, each one's configuration),
    those the ``deadline`` left out dropped."""
    from costmodel.core.parallel import run_all, workers_for
    from costmodel.core.progress import bar

    points = [requests.with_(concurrency=c, request_rate=r) for c, r in loads]
    tasks = [(m, hw, p, *setup) for setup in configs for hw in hws for m in layouts for p in points]
    with bar(len(tasks), "loads") as advance:
        results = run_all(
            serve_point,
            tasks,
            workers_for(len(tasks), 2),
            lambda _: advance(),
            costliest=lambda t: -(t[2].concurrency or t[2].request_rate or 0),
            deadline=deadline,
        )
    kept = [i for i, r in enumerate(results) if r is not None]
    if deadline is not None and deadline.stopped:
        deadline.stop(len(kept), len(tasks), "load points", "the points priced so far")
    return [results[i] for i in kept], [tasks[i][3:] for i in kept]


def configurations(load: dict, pricing: dict) -> list:
    """(Layout, EngineFlags, serve()'s other arguments) of every configuration the comma lists of --tp, --engine,
    --weight-dtype and --kv-dtype name (their product; one where none is a list)."""
    from itertools import product

    def listed(value):
        return value if isinstance(value, tuple) else (value,)

    out = []
    for tp, engine, weight, kv in product(
        listed(pricing["tp"]), listed(load["engine_name"]), listed(pricing["weight_dtype"]), listed(pricing["kv_dtype"])
    ):
        one = pricing | dict(tp=tp, weight_dtype=weight, kv_dtype=kv)
        out.append(engine_setup(load | dict(engine_name=engine), one))
    return out
