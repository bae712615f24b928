"""``costmodel predict --gemm M,N,K``: one GEMM's time on each device, as a published GEMM table's row is priced."""

from __future__ import annotations

from costmodel.core.errors import CostModelError


def gemm_shape(spec: str) -> tuple[int, int, int]:
    """M, N and K from ``M,N,K`` (whole numbers)."""
    parts = spec.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise CostModelError(f"--gemm {spec!r}: give M,N,K as three positive whole numbers (e.g. 4096,8192,2048)")
    return tuple(int(p) for p in parts)


def predict_gemms(hws: list, fmt: str, spec: str, gemm_dtype: str, timing, without, kernels) -> None:
    """Print one GEMM's prediction per device (JSON: one object, or a list for several devices)."""
    from costmodel.cli.options import emit_json
    from costmodel.price.gemm import predict_gemm
    from costmodel.render.text import si

    M, N, K = gemm_shape(spec)
    results = [predict_gemm(hw, M, N, K, gemm_dtype, timing, without, kernels) for hw in hws]
    if fmt == "json":
        emit_json(results[0] if len(results) == 1 else results)
        return
    for r in results:
        op = r["ops"][0]
        print(
            f"{r['hardware']}: {M} x {K} by {K} x {N} ({gemm_dtype}) {si(op['time_s'], 's')}, {op['bound']}-bound "
            f"(compute {si(op['compute_s'], 's')}, memory {si(op['memory_s'], 's')}, fixed {si(op['launch_s'], 's')}); "
            f"class {op['efficiency_class'] or 'none'}: {op['parameters']}"
        )
