"""Rewrites the output shown under each ``$ costmodel ...`` console block of the README and docs/ with what the
command prints now (a block that ends in ``...`` keeps as many lines as it shows). tests/test_docs.py holds every
block to its command; run this after a change to what a command prints, then read the diff.

    python docs/refresh_console.py [PAGE ...]
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(```console\n\$ (costmodel [^\n]*)\n)(.*?)(```)", re.S)
SHARED = ROOT.parent / "shared" / "measurements"


def printed(command: str) -> str:
    """What ``command`` prints, the published tables named as they lie beside the checkout."""
    from costmodel.cli.commands import main

    args = [
        str(SHARED) + a[len("../shared/measurements") :] if a.startswith("../shared/measurements") else a
        for a in shlex.split(command)[1:]
    ]
    result = CliRunner().invoke(main, args)
    if result.exit_code != 0:
        raise SystemExit(f"{command}: exit {result.exit_code}: {result.output}")
    return "\n".join(line.rstrip() for line in result.output.rstrip("\n").splitlines())


def refresh(page: Path) -> int:
    """Rewrite ``page``'s console blocks; the number changed."""
    text, changed = page.read_text(encoding="utf-8"), 0

    def block(m: re.Match) -> str:
        nonlocal changed
        shown = m.group(3)
        lines = printed(m.group(2)).splitlines()
        kept = shown.rstrip("\n").splitlines()
        if kept and kept[-1] == "...":
            lines = [*lines[: len(kept) - 1], "..."]
        new = "\n".join(lines) + "\n"
        changed += new != shown
        return m.group(1) + new + m.group(4)

    out = BLOCK.sub(block, text)
    if out != text:
        page.write_text(out, encoding="utf-8")
    return changed


def main(pages: list[str]) -> None:
    for page in [Path(p) for p in pages] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        n = refresh(page)
        if n:
            print(
                f"{page.relative_to(ROOT) if page.is_absolute() else page}: {n} block{'s' if n > 1 else ''} rewritten"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
