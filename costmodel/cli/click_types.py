"""The command line's own click types: a command whose options may each be given once, a group whose errors are one line, and checked numbers."""

from __future__ import annotations

import sys

import click

from costmodel.core.checks import excerpt
from costmodel.core.errors import CostModelError
from costmodel.core.invocation import command_line  # noqa: F401 - the commands' own, where they take it from
from costmodel.core.vocab import (
    DECIMAL,
    ENGINE_NAMES,
    MAX_DIGITS,
    MAX_DIM,
    whole,
)


def repeated_option(command: click.Command, args: list[str]) -> str | None:
    """The first option of ``command`` that ``args`` give twice with different values (a single-valued option
    keeps only its last value, so a conflict would pass silently), described for an error; else None."""
    takes = {}
    for param in command.params:
        if isinstance(param, click.Option) and not param.multiple and not param.count:
            for opt in (*param.opts, *param.secondary_opts):
                takes[opt] = param
    seen: dict[str, tuple[str, str]] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            break
        opt, eq, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        param = takes.get(opt)
        if param is not None:
            if param.is_flag:
                value = opt
            elif eq:
                value = inline
            else:
                value = args[i + 1] if i + 1 < len(args) else ""
                i += 1
            before = seen.get(param.name)
            if before is not None and before[1] != value:
                return f"{before[0]} is given twice with different values ({before[1]!r} and {value!r}); give it once"
            seen[param.name] = (opt, value)
        i += 1
    return None


class OnceCommand(click.Command):
    """A command whose single-valued options may not be given twice with different values; where it has
    ``panels`` (parameter name -> title), its help lists the options in those panels, in the order of their first
    parameter, and any other under "Other options"."""

    panels: dict[str, str] | None = None

    def parse_args(self, ctx, args):
        problem = repeated_option(self, list(args))
        if problem is not None:
            raise click.UsageError(problem, ctx)
        return super().parse_args(ctx, args)

    def format_options(self, ctx, formatter):
        if not self.panels:
            return super().format_options(ctx, formatter)
        groups: dict[str, list] = {}
        first = next(iter(self.panels.values()))
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:  # --help goes in the first panel
                title = first if param is self.get_help_option(ctx) else self.panels.get(param.name, "Other options")
                groups.setdefault(title, []).append(record)
        for title in [*dict.fromkeys(self.panels.values()), "Other options"]:
            if title in groups:
                with formatter.section(title):
                    formatter.write_dl(groups[title])


class ErrorLineGroup(click.Group):
    """Turns a :class:`CostModelError` into one ``Error:`` line and exit status 1; anything else that
    escapes a command is a bug, reported in one line with the command that reproduces it (exit 3). Its
    commands are :class:`OnceCommand` and its groups of the same kind."""

    command_class = OnceCommand
    group_class = type

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CostModelError as err:
            raise click.ClickException(str(err)) from None
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:  # the reader of standard output went away (``| head``): nothing left to say
            import os

            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError, AttributeError):  # not a real file (a test's runner)
                pass
            raise SystemExit(1) from None
        except Exception as err:  # noqa: BLE001 - the one place that reports bugs without a traceback
            import shlex

            command = shlex.join(["costmodel", *sys.argv[1:]]) if sys.argv[1:] else "costmodel"
            error = click.ClickException(
                f"internal error (a bug in costmodel, please report it with the command "
                f"`{command}`): {type(err).__name__}: {str(err)[:300]}"
            )
            error.exit_code = 3
            raise error from None


class PositiveNumber(click.ParamType):
    """A positive, finite decimal number in ASCII digits (``50``, ``2.5``, ``1e3``; no ``inf``, ``nan`` or
    other scripts' digits); ``allow_inf``: ``inf`` too."""

    name = "number"

    def __init__(self, allow_inf: bool = False):
        self.allow_inf = allow_inf

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            number = value
        elif self.allow_inf and isinstance(value, str) and value.strip().lower() == "inf":
            return float("inf")
        elif not isinstance(value, str) or not DECIMAL.fullmatch(value):
            self.fail(
                f"{excerpt(value)} is not a positive decimal number (e.g. 50 or 2.5"
                + (", or inf)" if self.allow_inf else ")"),
                param,
                ctx,
            )
        else:
            number = float(value)
        if not 0 < number < float("inf") and not (self.allow_inf and number == float("inf")):
            self.fail(f"{excerpt(value)} is not a positive, finite number", param, ctx)
        return number


class Price(PositiveNumber):
    """A price per GPU-hour for every device kind (``2.5``) or for one (``h100=2.5``: a --gpu and its price), as
    (None, price) or (device, price)."""

    name = "[gpu=]price"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        device, eq, number = value.rpartition("=") if isinstance(value, str) else ("", "", value)
        if eq and not device:
            self.fail(f"{excerpt(value)} names no device before '=' (e.g. h100=2.5)", param, ctx)
        return (device or None, super().convert(number, param, ctx))


class Count(click.ParamType):
    """A whole number, optionally with a size suffix as serving engines write it (vLLM's convention): k, m,
    g are powers of 1000 and K, M, G powers of 1024, so ``--context 128k`` is 128000 and ``128K`` 131072."""

    name = "integer"

    def __init__(self, least: int = 1):
        self.least = least

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value)
            number = whole(text)
            if number is None and text.isascii() and text.isdigit() and len(text) > MAX_DIGITS:  # too many to read
                self.fail(f"{excerpt(value, quote=False)} is not in the range {self.least}<=x<={MAX_DIM}.", param, ctx)
            if number is None:
                self.fail(
                    f"{excerpt(value)} is not a whole number: ASCII digits without a leading zero, optionally one "
                    "suffix (k, m, g = 1000^n; K, M, G = 1024^n), e.g. 4096 or 128k",
                    param,
                    ctx,
                )
        if not self.least <= number <= MAX_DIM:
            self.fail(f"{excerpt(value, quote=False)} is not in the range {self.least}<=x<={MAX_DIM}.", param, ctx)
        return number


#: The most load points one curve may hold.
MAX_LOAD_POINTS = 256


class Loads(click.ParamType):
    """One load or a curve of them: a whole number, a comma list (``1,4,16,64``) or a range (``1:256:x2``) of
    clients (``number="count"``); a positive number or a comma list of them (requests per second,
    ``number="rate"``). A tuple, in the order given, at most :data:`MAX_LOAD_POINTS` long."""

    def __init__(self, number: str = "count"):
        self.number = number
        self.name = "integers" if number == "count" else "numbers"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        text = str(value)
        if self.number == "count" and ":" in text:
            from costmodel.attention.sweeps import parse_range

            try:
                values = tuple(parse_range(text, MAX_LOAD_POINTS))
            except CostModelError as err:
                if "more than the limit" in str(err):
                    self.fail(
                        f"{excerpt(value)} gives more than {MAX_LOAD_POINTS} loads; use a coarser step", param, ctx
                    )
                self.fail(str(err), param, ctx)
        else:
            one = Count(1) if self.number == "count" else PositiveNumber()
            values = tuple(one.convert(part.strip(), param, ctx) for part in text.split(","))
        if not 1 <= len(values) <= MAX_LOAD_POINTS:
            self.fail(f"{excerpt(value)} gives {len(values)} loads; give 1 to {MAX_LOAD_POINTS}", param, ctx)
        if len(set(values)) != len(values):
            self.fail(f"{excerpt(value)} names a load twice", param, ctx)
        return values


class Objectives(click.ParamType):
    """vllm bench serve's ``--goodput``: ``ttft:200 tpot:50`` (or with commas), each a metric (ttft, tpot, e2el) and
    its limit in milliseconds; as (metric, seconds) pairs."""

    name = "objectives"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        out = {}
        for part in str(value).replace(",", " ").split():
            metric, sep, ms = part.partition(":")
            if not sep or metric.lower() not in ("ttft", "tpot", "e2el") or not DECIMAL.fullmatch(ms) or float(ms) <= 0:
                self.fail(
                    f"{excerpt(part)} is not METRIC:MILLISECONDS with METRIC ttft, tpot or e2el (e.g. ttft:200)",
                    param,
                    ctx,
                )
            out[metric.lower()] = float(ms) / 1e3
        if not out:
            self.fail("give at least one objective, e.g. ttft:200 tpot:50", param, ctx)
        return tuple(out.items())


_ENGINES = click.Choice(list(ENGINE_NAMES), case_sensitive=False)


class EngineChoice(click.ParamType):
    """An engine's name, or ``name==release`` as pip spells a pinned release (``vllm==0.8.5``): the release goes
    to ``--engine-version`` (:func:`engine_version`)."""

    name = "ENGINE"
    choices = ENGINE_NAMES  # the names alone, as the page's field offers them

    def convert(self, value, param, ctx):
        if "," in str(value) and ctx is not None and ctx.info_name == "predict":  # configurations compared
            if "==" in str(value):
                self.fail(
                    f"{value!r}: a comma list names engines without a release (pin one with one engine)", param, ctx
                )
            names = tuple(_ENGINES.convert(v.strip(), param, ctx) for v in str(value).split(","))
            if len(set(names)) != len(names):
                self.fail(f"{value!r} names an engine twice", param, ctx)
            return names
        name, _, version = str(value).partition("==")
        name = _ENGINES.convert(name.strip(), param, ctx)
        if version and ctx is not None:
            given = ctx.params.get("engine_version")
            if given is not None and given != version.strip():
                self.fail(f"{value!r} names release {version.strip()}, --engine-version {given}", param, ctx)
            ctx.meta["engine_version"] = ctx.params["engine_version"] = version.strip()
        return name

    def get_metavar(self, param, ctx=None):
        return "[" + "|".join(ENGINE_NAMES) + "][==RELEASE]"


def engine_version(ctx, param, value):
    """--engine-version, or the release ``--engine name==release`` named (the two must agree)."""
    pinned = ctx.meta.get("engine_version")
    if value is not None and pinned is not None and value != pinned:
        raise click.BadParameter(f"{value} differs from the release --engine names ({pinned})", ctx, param)
    return value if value is not None else pinned


class Fraction(click.ParamType):
    name = "FRACTION"

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number in (0, 1]", param, ctx)
        if not 0 < x <= 1:
            self.fail(f"{value!r} is not in (0, 1]", param, ctx)
        return x
