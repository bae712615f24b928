"""Where files enter and leave costmodel: bounded, checked reads and atomic writes.

Reads: at most :data:`MAX_INPUT_BYTES`, UTF-8, and YAML/JSON nested at most :data:`MAX_DEPTH` deep, every
failure a :class:`CostModelError` naming the file. Writes: the output path is checked before any work (a
folder that exists and takes a new file, a name the file system accepts, not a directory, not a read-only
file); the data goes to a temporary file beside the target that replaces it only when complete, keeping
an existing file's permissions and writing through a symlink to its target; an error, Ctrl-C or SIGTERM
leaves the old file as it was and no temporary file behind.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator

from costmodel.core.errors import CostModelError

#: An output path that means standard output, for every option that names a file to write.
STDOUT = "-"
#: The largest profile or model config read (the shipped ones are a few kB).
MAX_INPUT_BYTES = 1 << 20
#: The deepest nesting of mappings and lists accepted in a profile or config (the shipped ones use 4).
MAX_DEPTH = 32


def _reason(err: OSError) -> str:
    return (err.strerror or str(err)).lower()


def read_text(path: str, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The text of ``path`` (UTF-8, at most ``limit`` bytes); ``what`` names the file in errors."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as err:
        raise CostModelError(f"cannot read {what} {path}: {_reason(err)}") from None
    if len(data) > limit:
        raise CostModelError(f"{what} {path} is larger than {limit >> 20} MiB; it is not a {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise CostModelError(
            f"{what} {path} is not UTF-8 text (line {line}, byte {err.start}: {data[err.start]:#04x}); save it as UTF-8"
        ) from None


def read_csv(path: str, what: str, limit: int = MAX_INPUT_BYTES) -> tuple[list[str], list[dict]]:
    """(columns, rows as dicts) of the CSV file ``path``: UTF-8 (with or without a byte-order mark), any line
    ending; a file that is not text, a NUL byte, a row the csv module cannot read or a column named twice is an
    error naming the file and the line (``what`` names the file's kind)."""
    import csv
    import io

    text = read_text(path, what, limit).removeprefix("\ufeff")
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise CostModelError(f"{what} {path}: line {line}: a NUL byte: binary data, not a table")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, [])
        seen: set[str] = set()
        twice = next((c for c in header if c in seen or seen.add(c)), None)
        if twice is not None:
            raise CostModelError(f"{what} {path}: line 1: the column {twice[:40]!r} is named twice")
        # as csv.DictReader reads them: empty lines skipped, a short row's missing fields None
        rows = [dict(zip(header, line + [None] * (len(header) - len(line)))) for line in reader if line]
    except csv.Error as err:
        raise CostModelError(f"{what} {path}: line {reader.line_num}: {err}") from None
    return header, rows


def check_depth(text: str, origin: str) -> None:
    """Refuse YAML or JSON nested deeper than MAX_DEPTH before a parser recurses into it."""
    depth = deepest = 0
    quote = None
    indents = set()
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if stripped and not stripped.startswith("#"):
            indents.add(len(line) - len(stripped))
        for i, ch in enumerate(line):
            if not quote and ch == "#" and (i == 0 or line[i - 1] in " \t"):
                break  # a YAML comment
            if quote:
                if ch == quote:
                    quote = None
            elif ch in "\"'":
                quote = ch
            elif ch in "[{":
                depth += 1
                deepest = max(deepest, depth)
            elif ch in "]}":
                depth -= 1
        quote = None  # a string spanning lines is rare; at worst a bracket inside it is miscounted
    if max(deepest, len(indents)) > MAX_DEPTH:
        raise CostModelError(f"{origin}: nested more than {MAX_DEPTH} levels deep; profiles and configs are flat")


class DuplicateKey(ValueError):
    pass


@functools.lru_cache(maxsize=1)
def _loader():
    """A safe YAML loader that refuses a key given twice in one mapping (the second would silently win) and
    reads ``1e12`` as a number, as YAML 1.2 and JSON do (YAML 1.1 wants ``1.0e+12`` and reads ``1e12`` as text)."""
    import re

    import yaml

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, (str, int, float, bool)) and key in seen:
                    raise DuplicateKey(f"key {key!r} is given twice (line {key_node.start_mark.line + 1})")
                seen.add(key)
            return super().construct_mapping(node, deep)

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
    return Loader


def safe_yaml(text: str):
    """YAML 1.1 as yaml.safe_load reads it, through libyaml where PyYAML has it (ten times faster): the shipped
    files the package reads itself."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_yaml(text: str, origin: str):
    import yaml

    check_depth(text, origin)
    try:
        return yaml.load(text, Loader=_loader())
    except DuplicateKey as err:
        raise CostModelError(f"{origin}: {err}") from None
    except yaml.YAMLError as err:
        raise CostModelError(f"{origin}: not valid YAML ({str(err).splitlines()[0]})") from None
    except RecursionError:
        raise CostModelError(f"{origin}: nested too deeply") from None


def load_json(text: str, origin: str):
    import json

    check_depth(text, origin)

    def unique(pairs):
        out = dict(pairs)
        if len(out) < len(pairs):
            seen = set()
            twice = next(k for k, _ in pairs if k in seen or seen.add(k))
            raise CostModelError(f"{origin}: key {twice!r} is given twice")
        return out

    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as err:
        raise CostModelError(f"{origin}: not valid JSON ({err.msg} at line {err.lineno})") from None
    except RecursionError:
        raise CostModelError(f"{origin}: nested too deeply") from None


def check_folder(path: str) -> str:
    """Check that ``path`` can be written, before any long work; returns the real path to write.

    The folder must exist and take a new file (tried, not guessed from permission bits), the name must
    be one the file system accepts, and an existing target must be a regular file with a write bit.
    """
    if not path or not path.strip():
        raise CostModelError("an output path must not be empty")
    if path == STDOUT:
        return path
    if "\0" in path:
        raise CostModelError(f"cannot write {path!r}: the path contains a NUL byte")
    target = os.path.realpath(path)  # a symlink is written through to its target
    folder = os.path.dirname(target)
    if os.path.isdir(target):
        raise CostModelError(f"cannot write {path}: it is a directory")
    if not os.path.isdir(folder):
        raise CostModelError(f"cannot write {path}: folder {os.path.dirname(os.path.abspath(path))} does not exist")
    name_max = 255
    with contextlib.suppress(OSError, ValueError):
        name_max = os.pathconf(folder, "PC_NAME_MAX")
    if len(os.path.basename(target).encode()) > name_max:
        raise CostModelError(f"cannot write {path}: the file name is longer than {name_max} bytes")
    if os.path.lexists(target):
        st = os.stat(target)
        if not stat.S_ISREG(st.st_mode):
            raise CostModelError(f"cannot write {path}: it exists and is not a regular file")
        if not st.st_mode & 0o222 or not os.access(target, os.W_OK):
            raise CostModelError(
                f"cannot write {path}: the file is read-only (make it writable or choose another path)"
            )
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".costmodel-probe-")
    except OSError as err:
        raise CostModelError(f"cannot write {path}: {_reason(err)} in folder {folder}") from None
    os.close(fd)
    os.unlink(probe)
    return target


@contextlib.contextmanager
def _cleanup_on_sigterm(tmp: str) -> Iterator[None]:
    """While a temporary file exists, SIGTERM removes it before the process ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum, frame):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        signal.signal(signal.SIGTERM, previous if callable(previous) else signal.SIG_DFL)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` (or a symlink's target),
    with the existing file's permissions or, for a new file, what ``open()`` would give. ``-``: the finished
    file is copied to standard output."""
    if path == STDOUT:
        with tempfile.TemporaryDirectory(prefix="costmodel-") as folder:
            tmp = os.path.join(folder, "out")
            yield tmp
            import sys

            with open(tmp, "rb") as done:
                sys.stdout.flush()
                sys.stdout.buffer.write(done.read())
                sys.stdout.flush()
        return
    target = check_folder(path)
    folder = os.path.dirname(target)
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".costmodel-", suffix=os.path.splitext(target)[1])
    except OSError as err:
        raise CostModelError(f"cannot write {path}: {_reason(err)}") from None
    os.close(fd)
    try:
        with _cleanup_on_sigterm(tmp):
            yield tmp
            if os.path.exists(target):
                mode = stat.S_IMODE(os.stat(target).st_mode)
            else:
                umask = os.umask(0)
                os.umask(umask)
                mode = 0o666 & ~umask  # mkstemp makes the file private; give it what open() would
            os.chmod(tmp, mode)
            os.replace(tmp, target)
    except OSError as err:
        raise CostModelError(f"cannot write {path}: {_reason(err)}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path: str, text: str) -> None:
    """Write ``text`` whole to ``path`` (``-``: standard output)."""
    if path == STDOUT:
        import sys

        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as out:
        out.write(text)


def wrote(*paths) -> list[str]:
    """The ``wrote ...`` line for the files written (none for standard output, which holds the data itself)."""
    files = [str(p) for p in paths if p and p != STDOUT]
    return [f"wrote {' and '.join(files)}"] if files else []
