"""Derive the memory/arithmetic ratios of Shazeer 2019 for MHA, GQA and MQA, and check the paper's forms.

python examples/paper_ratios.py
"""

from costmodel import derive
from costmodel.counts.asymptotic import analyze

for variant, mode in [("mha", "batched"), ("mha", "generate"), ("gqa", "generate"), ("mqa", "generate")]:
    a = analyze(derive(variant, mode))
    print(f"{variant} {mode:9s} derived Θ({a.ratio})")
    if a.claim is not None:
        verdict = "holds" if a.claim_holds else f"holds if {a.extra_assumptions[0].split(':')[0]}"
        print(f"{'':14s}paper   {a.claim.kind}({a.claim.ratio})  [{a.claim.source.split(' (')[0]}]: {verdict}")
