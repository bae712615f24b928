"""costmodel: exact FLOP and memory costs of MHA, GQA and MQA, and what they cost on an accelerator."""

from costmodel.counts import CostReport, OpCost, derive
from costmodel.errors import CostModelError
from costmodel.program import Op, Program, Tensor, build_program

__all__ = ["CostModelError", "CostReport", "Op", "OpCost", "Program", "Tensor", "build_program", "derive"]
__version__ = "0.1.0"
