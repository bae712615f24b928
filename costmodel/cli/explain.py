"""``costmodel explain``: the long derivations behind a prediction's assumptions, each by the name an assumption
gives it, so that the assumptions themselves read in one pass."""

from __future__ import annotations

import click

from costmodel.core.errors import CostModelError

#: topic -> what it explains
TOPICS = {
    "time-model": "how one op's time is put together from its mechanisms",
    "transfer-rule": "how a fitted GPU's parameters are carried to a GPU no fit saw",
    "efficiency": "where each kernel class's parameters come from on one device (--gpu)",
    "ranges": "how the range around a kernel prediction is derived from published timings",
    "served-ranges": "how the range around a served TTFT and TPOT is derived from measured deployments",
}


def text(topic: str, gpu: str | None) -> str:
    """The explanation of ``topic`` (``gpu``: the device, for ``efficiency``)."""
    if topic == "time-model":
        from costmodel.attention.roofline import time_model_text

        return time_model_text()
    if topic == "transfer-rule":
        from costmodel.price.transfer import TRANSFER_RULE

        return f"transfer rule: {TRANSFER_RULE}"
    if topic in ("ranges", "served-ranges"):
        from costmodel.price.bands import RANGES_TEXT, SERVED_RANGES_TEXT

        return RANGES_TEXT if topic == "ranges" else SERVED_RANGES_TEXT
    if gpu is None:
        raise CostModelError("explain efficiency needs --gpu ID (costmodel hardware list)")
    from costmodel.hardware.catalog import load_profile
    from costmodel.price.origin import resolve

    hw = load_profile(gpu)
    resolved = resolve(hw, "graph")
    if resolved is None:
        return f"{hw.id}: no fitted efficiency (none fitted, none transferable): the datasheet roofline"
    return "\n".join([f"{hw.id}, graph timing:", *(f"  {cls}: {o}" for cls, o in sorted(resolved.origin.items()))])


@click.command()
@click.argument("topic", required=False, type=click.Choice(sorted(TOPICS)))
@click.option("--gpu", help="the device, for efficiency (an id or alias: costmodel hardware list)")
def explain(topic, gpu) -> None:
    """The long derivations behind a prediction's assumptions, by the name an assumption gives (`costmodel explain
    transfer-rule`); without a topic, the topics.

    Example: costmodel explain transfer-rule
    """
    if topic is None:
        width = max(map(len, TOPICS))
        for name, what in TOPICS.items():
            click.echo(f"{name.ljust(width)}  {what}")
        return
    click.echo(text(topic, gpu))
