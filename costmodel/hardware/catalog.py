"""The shipped hardware profiles and user YAML files: found by id, alias (case-insensitive), device name or path,
parsed and validated into :class:`costmodel.hardware.profile.HardwareProfile`, every failure one error naming the file
and the field."""

from __future__ import annotations

import difflib
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from costmodel.core.checks import bounded_repr
from costmodel.core.errors import CostModelError
from costmodel.core.files import load_yaml, read_text
from costmodel.hardware.profile import HardwareProfile

#: Short names that resolve to a documented default variant (also listed in each file's aliases).
PACKAGE = "costmodel.hardware_profiles"


def profile_key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _profile_files() -> list:
    return sorted((f for f in resources.files(PACKAGE).iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name)


@lru_cache(maxsize=64)
def _parse(text: str, origin: str) -> HardwareProfile:
    """The profile a file's ``text`` holds, parsed and validated once per text (a profile is frozen: every caller
    may share it; a file whose text changed is parsed again)."""
    return _validated(load_yaml(text, origin), origin)


def _validated(data, origin: str) -> HardwareProfile:
    """A profile's fields, as read from ``origin``, checked: the profile, or one error naming the first bad field."""
    if not isinstance(data, dict):
        raise CostModelError(f"{origin}: expected a mapping of profile fields, got {type(data).__name__}")
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        whole = not first["loc"]  # a check of the whole profile: its input is the whole file
        shown = bounded_repr(first["input"])
        got = f" (got {shown})" if first["type"] not in ("missing", "extra_forbidden") and not whole else ""
        msg = first["msg"].removeprefix("Value error, ")
        raise CostModelError(f"{origin}: field {where}: {msg}{got[:80]}{more}") from None


@lru_cache(maxsize=1)
def profile_index() -> dict[str, object]:
    """Lookup key (id or alias, normalised) -> profile file, from each file's top-level ``id`` and ``aliases``
    lines alone (one profile is parsed and validated when it is asked for, not all of them)."""
    from costmodel.core.files import safe_yaml

    index: dict[str, object] = {}
    for f in _profile_files():
        lines = [line for line in f.read_text(encoding="utf-8").splitlines() if line.startswith(("id:", "aliases:"))]
        head = safe_yaml("\n".join(lines))
        for name in (head["id"], *head.get("aliases", ())):
            index[profile_key(name)] = f
    return index


@lru_cache(maxsize=1)
def fitted_profiles() -> tuple[HardwareProfile, ...]:
    """The shipped profiles with fitted efficiency parameters (only their files are parsed)."""
    files = [f for f in _profile_files() if "\nefficiency:" in f.read_text(encoding="utf-8")]
    return tuple(
        p
        for p in (_parse(f.read_text(encoding="utf-8"), f.name) for f in files)
        if p.efficiency is not None and p.architecture is not None
    )


def device_name_key(name: str) -> str:
    """The matching rule for device names: case-insensitive, runs of spaces as one, and a leading
    ``NVIDIA`` ignored (older drivers report ``A100-SXM4-40GB`` where newer ones say ``NVIDIA A100-SXM4-40GB``).
    Nothing else is relaxed: ``NVIDIA L40`` is not ``NVIDIA L40S``, and an H100 NVL is not an H100 PCIe."""
    key = " ".join(name.split()).casefold()
    return key.removeprefix("nvidia ")


@lru_cache(maxsize=1)
def _device_names() -> dict[str, str]:
    """Device-name key -> profile id, from every shipped profile's ``device_names``."""
    return {device_name_key(n): p.id for p in load_all() for n in p.device_names}


def profile_for_device(name: str) -> HardwareProfile:
    """The shipped profile whose ``device_names`` lists ``name`` (as ``torch.cuda.get_device_name()``
    reports it); an error listing the known device names otherwise, never the nearest profile."""
    from costmodel.core.checks import text

    text("device name", name)
    pid = _device_names().get(device_name_key(name))
    if pid is None:
        known = sorted({n for p in load_all() for n in p.device_names})
        raise CostModelError(
            f"no hardware profile is for device {name!r}; profiles exist for {', '.join(known)}; "
            "give a profile id or a YAML profile instead"
        )
    return load_profile(pid)


def profile_ids() -> list[str]:
    """Ids of the shipped profiles."""
    return [f.name.removesuffix(".yaml") for f in _profile_files()]


@lru_cache(maxsize=1)
def _load_all() -> tuple[HardwareProfile, ...]:
    return tuple(_parse(f.read_text(encoding="utf-8"), f.name) for f in _profile_files())


def load_all() -> list[HardwareProfile]:
    """Every shipped profile, validated."""
    return list(_load_all())


def is_listed(name: str) -> bool:
    """Whether ``name`` is a shipped profile's id or alias (not a path)."""
    return profile_key(name) in profile_index()


def load_profile(name: str) -> HardwareProfile:
    """A profile by id or alias (case-insensitive, ``-`` or ``_``), or from a path to a YAML file."""
    from costmodel.core.checks import text

    text("hardware name", name)
    try:
        path = Path(name).expanduser()
        is_file = path.is_file()
    except (OSError, ValueError, RuntimeError):  # too long a name, a NUL byte, ~nobody: no file
        path, is_file = Path(name), False
    if name.endswith((".yaml", ".yml")) or is_file:
        if not is_file:
            raise CostModelError(f"profile file {name} does not exist")
        return _parse(read_text(str(path), "profile"), str(path))
    f = profile_index().get(profile_key(name))
    if f is None:
        close = difflib.get_close_matches(profile_key(name), list(profile_index()), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise CostModelError(
            f"unknown hardware {name!r}{hint} (`costmodel hardware list` shows all; a path to a YAML profile also works)"
        )
    return _parse(f.read_text(encoding="utf-8"), f.name)
