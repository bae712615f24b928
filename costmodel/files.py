"""Writing output files atomically: a run that fails or is interrupted leaves nothing half-written."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

from costmodel.errors import CostModelError


def check_folder(path: str) -> str:
    """The folder ``path`` would be written into; an error when it does not exist (check before long work)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CostModelError(f"cannot write {path}: folder {folder} does not exist")
    return folder


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` with the usual permissions."""
    folder = check_folder(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".costmodel-", suffix=os.path.splitext(path)[1])
    os.close(fd)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; give it what open() would
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path: str, text: str) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as out:
        out.write(text)
