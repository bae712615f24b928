"""A Hugging Face Hub model by its id (``org/name``): its ``config.json`` from the local Hugging Face cache, or
fetched (that one file) with ``huggingface_hub`` when it is installed and the Hub is not turned off.

The cache is laid out as ``huggingface_hub`` keeps it: ``$HF_HUB_CACHE`` (else ``$HF_HOME/hub``, else
``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``) holds ``models--ORG--NAME/refs/REVISION``
(the commit a branch or tag points at) and ``models--ORG--NAME/snapshots/COMMIT/config.json``. Nothing here
touches the network unless the file is not cached, ``HF_HUB_OFFLINE`` is not set and ``huggingface_hub`` is
installed (the ``hub`` extra).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from costmodel.core.errors import CostModelError

#: A Hub repository id: an owner and a name of letters, digits, ``-``, ``_`` and ``.`` (huggingface_hub's
#: validate_repo_id allows these, at most 96 characters each).
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}")
#: A revision: a branch or tag name, or a commit.
REVISION = re.compile(r"[\w.-]{1,96}")


def cache_dir() -> Path:
    """Where huggingface_hub keeps downloaded repositories (its own order of environment variables)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "huggingface" / "hub"


def offline() -> bool:
    """Whether the Hub is turned off (``HF_HUB_OFFLINE``, as huggingface_hub reads it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def is_repo_id(name: str) -> bool:
    return REPO_ID.fullmatch(name) is not None and ".." not in name


def cached_config(repo_id: str, revision: str = "main") -> Path | None:
    """The cached ``config.json`` of ``repo_id`` at ``revision`` (a branch or tag through its ref, or a commit),
    or None where the cache holds none."""
    folder = cache_dir() / ("models--" + repo_id.replace("/", "--"))
    ref = folder / "refs" / revision
    commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
    if not REVISION.fullmatch(commit):
        return None
    config = folder / "snapshots" / commit / "config.json"
    return config if config.is_file() else None


def config_path(repo_id: str, revision: str = "main") -> Path:
    """The ``config.json`` of Hub model ``repo_id``: cached, else fetched; an error saying how to give one where
    neither can be had."""
    if not REVISION.fullmatch(revision):
        raise CostModelError(f"revision {revision!r} is not a branch, tag or commit name")
    found = cached_config(repo_id, revision)
    if found is not None:
        return found
    how = (
        f"download it (huggingface-cli download {repo_id} config.json) or give a config.json path as --model"
        if revision == "main"
        else f"download it (huggingface-cli download {repo_id} config.json --revision {revision}) or give a "
        "config.json path as --model"
    )
    where = f"{repo_id!r} is not a preset, and its config.json is not in the Hugging Face cache ({cache_dir()})"
    if offline():
        raise CostModelError(f"{where}; HF_HUB_OFFLINE is set: {how}")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise CostModelError(
            f"{where}; fetching it needs huggingface_hub (pip install -e '.[hub]' in the checkout): {how}"
        ) from None
    try:
        return Path(hf_hub_download(repo_id, "config.json", revision=revision))
    except Exception as err:  # huggingface_hub's errors: not found, gated, no network
        raise CostModelError(f"{where}, and fetching it failed ({type(err).__name__}): {how}") from None
