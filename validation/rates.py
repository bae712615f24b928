"""A device's peak rates measured: matrix products sized to run long enough, memory bandwidth read, each with its timer."""

from __future__ import annotations

import time

import torch

from costmodel.validation.kernels import TORCH_DTYPES
from costmodel.validation.timing import Timer

SIZES = {  # (matmul N, bandwidth buffer bytes) per device and mode
    ("cpu", True): (512, 64 << 20),
    ("cpu", False): (2048, 512 << 20),
    ("cuda", True): (2048, 256 << 20),
    ("cuda", False): (8192, 2 << 30),
}


#: Longest one matmul of the peak measurement may take (quick, full): a dtype without fast kernels on this
#: device (bf16 on a CPU without AVX-512 BF16 runs at about 1 GFLOP/s) is measured on a smaller N.
MATMUL_SECONDS = {True: 0.02, False: 0.1}


def matmul_size(device: str, dtype: str, largest: int, seconds: float) -> int:
    """The largest power-of-two N <= ``largest`` whose N x N x N matmul takes at most about ``seconds``."""
    size = 128
    while size < largest:
        a = torch.randn(size, size, device=device, dtype=TORCH_DTYPES[dtype])
        a @ a  # warm-up: the first product of a size pays for kernel selection
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ a
        if device == "cuda":
            torch.cuda.synchronize()
        if (time.perf_counter() - start) * 8 > seconds:  # the next size takes 8x as long
            break
        size *= 2
    return size


def measured_dtypes(device: str) -> list[str]:
    if device == "cuda":
        return ["fp32", "tf32", "bf16", "fp16"]
    return ["fp32", "bf16"]


def read_bandwidth(device: str, nbytes: int, timer: Timer) -> float:
    """Bytes per second of reading (summing) an ``nbytes`` float32 buffer."""
    src = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
    return nbytes / timer.time(lambda: src.sum()).median_s


def matmul_rate(device: str, dtype: str, size: int, timer: Timer) -> float:
    """FLOP/s of a ``size`` x ``size`` x ``size`` matmul."""
    a = torch.randn(size, size, device=device, dtype=TORCH_DTYPES[dtype])
    b = torch.randn(size, size, device=device, dtype=TORCH_DTYPES[dtype])
    return 2 * size**3 / timer.time(lambda: a @ b).median_s


def rates_timer(device: str, quick: bool) -> Timer:
    """The timer of the peak-rate measurements: no cache flush (the operands are the point)."""
    return Timer(device, flush_bytes=0, budget_s=0.3 if quick else 1.0)
