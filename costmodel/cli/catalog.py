"""`costmodel hardware` and `costmodel models`: list and show the shipped profiles and presets."""

from __future__ import annotations

import click

from costmodel.cli.options import (
    emit_json,
    emit_records,
    format_option,
    json_option,
    output_format,
)


@click.group()
def hardware() -> None:
    """List and show the hardware profiles (one YAML file per device, every number sourced)."""


@hardware.command("list")
@format_option
@json_option
def hardware_list(fmt, as_json) -> None:
    """List the shipped hardware profiles.

    Example: costmodel hardware list
    """
    from costmodel.hardware.catalog import load_all
    from costmodel.price.origin import efficiency_status
    from costmodel.render.hardware import hardware_records, hardware_table

    fmt = output_format(fmt, as_json)
    profiles = load_all()
    status = {p.id: efficiency_status(p) for p in profiles}
    if fmt == "json":
        emit_json([p.model_dump(mode="json") for p in profiles])
    elif fmt in ("csv", "markdown"):
        emit_records(hardware_records(profiles, status), fmt)
    else:
        click.echo(hardware_table(profiles, status))


@hardware.command("show")
@click.argument("name")
@json_option
def hardware_show(name, as_json) -> None:
    """Show one profile by id, alias (case-insensitive) or YAML path, with the source of every number.

    Example: costmodel hardware show h100
    """
    from costmodel.hardware.catalog import load_profile
    from costmodel.render.hardware import hardware_detail

    profile = load_profile(name)
    if as_json:
        emit_json(profile.model_dump(mode="json"))
    else:
        from costmodel.price.origin import attention_reference, reference_for
        from costmodel.price.transfer import attention_kind

        ref = reference_for(profile) if profile.efficiency is None and profile.kind == "gpu" else None
        attention = attention_reference(profile, ref) if ref is not None else None
        click.echo(
            hardware_detail(
                profile,
                ref.id if ref is not None else None,
                (attention.id, attention_kind(profile)) if attention is not None else None,
            )
        )


@click.group()
def models() -> None:
    """List and show the model presets (one YAML file per model, every number sourced)."""


@models.command("list")
@format_option
@json_option
def models_list(fmt, as_json) -> None:
    """List the shipped model presets: parameters, attention, experts, windows.

    Example: costmodel models list
    """
    from costmodel.model.memory import model_facts
    from costmodel.model.presets import load_model, preset_ids
    from costmodel.render.models import model_records, models_table

    fmt = output_format(fmt, as_json)
    presets = [load_model(pid) for pid in preset_ids()]
    facts = {m.id: model_facts(m) for m in presets}
    if fmt == "json":
        emit_json([p.model_dump(mode="json") for p in presets])
    elif fmt in ("csv", "markdown"):
        emit_records(model_records(presets, facts), fmt)
    else:
        click.echo(models_table(presets, facts))


@models.command("show")
@click.argument("name")
@json_option
def models_show(name, as_json) -> None:
    """Show one model by preset id or alias, or a Hugging Face config.json (or a folder holding one).

    Example: costmodel models show deepseek-v2-lite
    """
    from costmodel.model.presets import load_model
    from costmodel.render.models import model_detail

    m = load_model(name)
    if as_json:
        from costmodel.model.memory import active_params, param_groups

        emit_json({**m.model_dump(mode="json"), "params": param_groups(m), "active_params": active_params(m)})
    else:
        from costmodel.model.memory import model_facts

        click.echo(model_detail(m, model_facts(m)))
