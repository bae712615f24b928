"""The ops of an attention program as real torch kernels, with the program's exact shapes.

Each op of :func:`costmodel.counts.program.build_program` becomes a callable on preallocated tensors of the
op's operand shapes: einsums run ``torch.einsum`` with the op's own equation; scale, mask and softmax
are the eager elementwise kernels; the cache append writes one position in place (or concatenates);
fused attention is ``torch.nn.functional.scaled_dot_product_attention`` over each K/V head with the query
heads that share it as its query rows (:func:`grouped_attention`).
A whole step runs every op's kernel in program order.

Weights are stored in the memory order in which the einsum needs no transposing copy (as a real
implementation stores them, e.g. ``[d, h, k]`` for ``P_q``); the paper's ``[h, d, k]`` order would make
torch copy the whole weight on every call. The order is found by watching which aten ops the einsum
dispatches on meta tensors.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
import torch.utils._python_dispatch
from torch.utils import flop_counter

from costmodel.attention.workload import Workload
from costmodel.counts import symbols as S
from costmodel.counts.ops import Op
from costmodel.counts.program import build_program

TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Kernel:
    name: str
    kind: str
    run: Callable[[], object]
    expected_flops: int  # what FlopCounterMode should count: the op's einsum FLOPs (elementwise: 0)


def _register_cpu_sdpa_flops() -> None:
    """FlopCounterMode has no formula for the CPU flash-attention kernel; give it torch's own SDPA formula."""
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    if op in flop_counter.flop_registry or op.default in flop_counter.flop_registry:
        return

    @flop_counter.register_flop_formula(op)
    def _cpu_sdpa(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)


def _shape(tensor, dims: dict) -> tuple[int, ...]:
    return tuple(int(s.subs(dims)) for s in tensor.shape)


def _einsum_flops(op: Op, dims: dict) -> int:
    parts = op.parts if op.kind == "fused" else (op,)
    return int(sum(p.flops.subs(dims) for p in parts if p.kind == "einsum"))


def build_kernels(w: Workload, device: str) -> list[Kernel]:
    """One kernel per op of the workload's program, on ``device``."""
    _register_cpu_sdpa_flops()
    dtype = TORCH_DTYPES.get(w.dtype)
    if dtype is None:
        raise ValueError(f"validation runs fp32, tf32, bf16 and fp16, not {w.dtype}")
    program = build_program(
        w.variant,
        w.mode,
        groups=w.g if w.variant == "gqa" else None,
        cache_append=w.cache_append,
        execution=w.execution,
    )
    dims = {S.SYMBOLS[k]: v for k, v in w.dims().items()}
    dims[S.g] = w.g
    new = lambda shape: torch.randn(shape, device=device, dtype=dtype)  # noqa: E731
    kernels = []
    # every tensor of the program by name (the first op to write or read it fixes its shape)
    tensors = {}
    for op in program.ops:
        for t in (op.output, *op.inputs):
            tensors.setdefault(t.name, t)
    for op in program.ops:
        inputs = [new(_shape(t, dims)) for t in op.inputs]
        if op.kind == "einsum":
            shapes = tuple(tuple(x.shape) for x in inputs)
            for i, t in enumerate(op.inputs):
                if t.name.startswith("P_"):
                    order = copy_free_order(op.einsum, shapes, i)
                    stored = new(tuple(shapes[i][j] for j in order))
                    inputs[i] = stored.permute(*sorted(range(len(order)), key=order.__getitem__))
        kernels.append(Kernel(op.name, op.kind, _callable(op, inputs, dims, w, new, tensors), _einsum_flops(op, dims)))
    return kernels


class _CopyCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the copies an einsum dispatches, and the bmm operands it passes transposed."""

    COPIES = {"clone", "copy_", "contiguous", "_to_copy"}

    def __init__(self):
        super().__init__()
        self.copies = 0
        self.copied_shapes: list[tuple[int, ...]] = []
        self.transposed = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in self.COPIES:
            self.copies += 1
            self.copied_shapes.append(tuple(args[0].shape) if args and isinstance(args[0], torch.Tensor) else ())
        if name in ("bmm", "mm"):
            self.transposed += sum(not a.is_contiguous() for a in args if isinstance(a, torch.Tensor))
        return func(*args, **(kwargs or {}))


@lru_cache(maxsize=256)
def copy_free_order(equation: str, shapes: tuple, index: int) -> tuple[int, ...]:
    """Storage order of weight ``index`` for which ``torch.einsum`` copies nothing and hands the matmul
    row-major operands (``[K, N]``, no transpose flag), as a GEMM-ready weight layout does."""
    rank = len(shapes[index])
    best, best_key = tuple(range(rank)), None
    for order in itertools.permutations(range(rank)):
        operands = [torch.empty(s, device="meta") for s in shapes]
        stored = torch.empty(tuple(shapes[index][j] for j in order), device="meta")
        operands[index] = stored.permute(*sorted(range(rank), key=order.__getitem__))
        with _CopyCounter() as counter:
            torch.einsum(equation, *operands)
        key = (counter.copies, counter.transposed)
        if best_key is None or key < best_key:
            best, best_key = order, key
    return best


def _callable(op: Op, inputs: list, dims: dict, w: Workload, new, tensors: dict) -> Callable[[], object]:
    if op.kind == "einsum":
        eq = op.einsum
        return lambda: torch.einsum(eq, *inputs)
    if op.kind == "elementwise":
        x = inputs[0]
        if op.name == "scale":
            factor = w.k**-0.5
            return lambda: x * factor
        if op.name == "mask":
            return lambda: x + inputs[1]
        return lambda: torch.softmax(x, dim=-1)
    if op.kind == "copy":
        if len(inputs) == 2:  # concat: the whole cache is copied (tf.concat)
            prev, step = inputs
            return lambda: torch.cat([prev, step.unsqueeze(2)], dim=2)
        (step,) = inputs
        # the cache attention reads, (b, g, m+1, k|v): preallocated, the new position written in place
        cache = new(_shape(tensors[op.output.name.split("[")[0]], dims))
        position = w.m

        def append():
            cache[:, :, position] = step

        return append
    # fused attention: q (b, h, n, k) over K, V (b, g, m, k|v).
    # q is the query projection's output: (b, h, k) for a decode step gets its one query position as n = 1.
    q = new(_shape(tensors["q"], dims))
    q = q.unsqueeze(2) if q.dim() == 3 else q
    keys, values = inputs[1], inputs[2]
    return lambda: grouped_attention(q, keys, values)


def grouped_attention(q, keys, values):
    """Attention of q (b, h, n, k) over K/V (b, g, m, k|v) that reads each K/V head once: the h/g query heads
    of a group (heads ``j * h/g`` to ``(j + 1) * h/g - 1`` share K/V head ``j``, as ``repeat_interleave``
    assigns them) become h/g x n query rows of one K/V head, a view of q, no copy. This is what the program
    counts and what GPU decode kernels do (FlashAttention's packed GQA). torch's own ``enable_gqa`` on the CPU
    runs each query head as its own work unit and streams its group's K/V again for every one of them: at
    b 8, 8192 positions, 16 heads in 4 groups it takes 2-3x as long as this form. Rows are independent only
    without a causal mask, which is how the validation's fused kernels run."""
    b, h, n, k = q.shape
    g = keys.shape[1]
    out = F.scaled_dot_product_attention(q.reshape(b, g, h // g * n, k), keys, values)
    return out.view(b, h, n, out.shape[-1])


def run_step(kernels: list[Kernel]) -> Callable[[], None]:
    """Every kernel of a step in program order (each on its own inputs: the same kernels and shapes)."""
    runs = [k.run for k in kernels]

    def step():
        for run in runs:
            run()

    return step


class _OpRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """The aten ops a call dispatches, in order, each once."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in self.ops:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def counted(kernel: Kernel) -> tuple[int, tuple[str, ...]]:
    """One call of the kernel, watched: the FLOPs torch's FlopCounterMode counts, and the aten ops it dispatches
    (which of torch's attention backends ran, say: ``_scaled_dot_product_flash_attention``,
    ``_scaled_dot_product_cudnn_attention``, ...), so that a report says which kernels it timed."""
    with flop_counter.FlopCounterMode(display=False) as counter, _OpRecorder() as recorder:
        kernel.run()
    return counter.get_total_flops(), tuple(recorder.ops)


def counted_flops(kernel: Kernel) -> int:
    """What torch's FlopCounterMode counts when the kernel runs."""
    return counted(kernel)[0]


def dispatched(kernel: Kernel) -> tuple[str, ...]:
    """The aten ops the kernel's call dispatches (:func:`counted`)."""
    return counted(kernel)[1]


__all__ = [
    "Kernel",
    "TORCH_DTYPES",
    "build_kernels",
    "counted",
    "counted_flops",
    "dispatched",
    "grouped_attention",
    "run_step",
]
