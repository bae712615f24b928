"""The command line a command was given, as arguments that give it again (for the command a page or a figure
says it was drawn by): read from click's context, so the renderers need not know the command line's modules."""

from __future__ import annotations

import click


def command_line(ctx: click.Context, skip=()) -> list[str]:
    """The options a command was given on its command line, as arguments that give them again (each by its first
    long name; a repeated option once per value; a flag alone when set), leaving out the parameters in ``skip``."""
    from click.core import ParameterSource

    out: list[str] = []
    for param in ctx.command.params:
        if param.name in skip or ctx.get_parameter_source(param.name) != ParameterSource.COMMANDLINE:
            continue
        value = ctx.params[param.name]
        names = [o for o in param.opts if o.startswith("--")] or list(param.opts)
        if isinstance(param, click.Option) and param.is_flag:
            on, off = (param.opts, param.secondary_opts) if param.secondary_opts else (param.opts, [])
            chosen = [o for o in (on if value else off) if o.startswith("--")] or list(on if value else off)
            out += chosen[:1] if (value or off) else []
            continue
        for v in value if param.multiple else [value]:
            # a list-valued option (a load curve's loads) as the comma list it was given as
            out += [
                names[0],
                ",".join(str(x) for x in v) if isinstance(v, tuple) else str(v),
            ]
    return out
