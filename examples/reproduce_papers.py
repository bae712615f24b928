"""Reproduce Shazeer 2019 (ratios and Table 2) and the GQA paper's groups sweep; writes docs/gqa2023.png.

python examples/reproduce_papers.py
"""

from pathlib import Path

from costmodel.cli.commands import main

DOCS = Path(__file__).resolve().parents[1] / "docs"

if __name__ == "__main__":
    DOCS.mkdir(exist_ok=True)
    main(["reproduce", "shazeer2019"], standalone_mode=False)
    print()
    main(["reproduce", "gqa2023", "--plot", str(DOCS / "gqa2023.png")], standalone_mode=False)
