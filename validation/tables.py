"""Published timing tables as data: where each lives in the measurements folder, the columns read, and one Table of rows of one kernel on one device."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from costmodel.core.errors import CostModelError

AIC = re.compile(
    r"^(?P<system>.+?)_(?P<framework>[a-z]+)_(?P<version>[0-9][0-9.]*[0-9a-z]*)_"
    r"(?:(?P<table>generation_attention|context_attention)(?:_perf)?|(?P<gemm>gemm))\.csv$"
)


#: The lower-precision GEMM tables (aiconfigurator's all_dtypes/): fp8 with one scale per tensor, fp8 with a
#: scale per 128 x 128 block, and NVFP4 (fp4 weights and activations, an FP8 scale per 16; Blackwell).
AIC_DTYPES = re.compile(
    r"^(?P<system>.+?)_(?P<framework>[a-z]+)_(?P<version>[0-9][0-9.]*[0-9a-z]*)_"
    r"(?P<table>gemm)_perf\.csv$"
)


VIDUR = re.compile(r"^(?P<system>[A-Za-z0-9]+)_mlp_ops\.csv$")


LLMCOMPASS = re.compile(
    r"^(?P<table>matmul|softmax|layernorm|gelu|transformer_prefill|transformer_decode)_"
    r"(?P<system>[A-Za-z0-9]+)\.csv$"
)


#: How each source timed its ops.
TIMING = {"aiconfigurator": "graph", "vidur": "kernels", "llmcompass": "eager"}


#: Files larger than this are not read (the largest published table here is 3.4 MB).
MAX_TABLE_BYTES = 64 << 20


SHIPPED = "costmodel.validation"


@dataclass
class Table:
    """Rows of one op class from one published file."""

    source: str
    gpu: str  # the table's system id
    profile: str
    op_class: str
    timing: str
    dtype: str
    file: str
    fields: dict[str, np.ndarray]  # the table's shape fields (and op names), per row
    measured_s: np.ndarray
    flops: np.ndarray
    nbytes: np.ndarray
    shape: dict = field(default_factory=dict)  # what the class's mechanisms need
    count: np.ndarray | None = None  # ops per measured time (LLMCompass's Q_K_V is three GEMMs)
    kernel: str | None = None  # the class whose kernel runs these rows, where not op_class's own
    engine: str | None = None  # the serving engine whose kernels were timed (vllm, sglang, trtllm), where one was
    engine_version: str | None = None

    @property
    def priced_class(self) -> str:
        """The efficiency class the rows are priced with: a one-query prefill runs the decode kernel."""
        return self.kernel or self.op_class

    def __len__(self) -> int:
        return len(self.measured_s)

    def select(self, keep: np.ndarray) -> Table:
        pick = lambda d: {k: (np.asarray(v)[keep] if np.ndim(v) else v) for k, v in d.items()}  # noqa: E731
        return Table(
            self.source,
            self.gpu,
            self.profile,
            self.op_class,
            self.timing,
            self.dtype,
            self.file,
            pick(self.fields),
            self.measured_s[keep],
            self.flops[keep],
            self.nbytes[keep],
            pick(self.shape),
            None if self.count is None else self.count[keep],
            self.kernel,
            self.engine,
            self.engine_version,
        )


def table_rows(path: Path) -> list[dict]:
    from costmodel.core.files import read_csv

    return read_csv(str(path), "published table", MAX_TABLE_BYTES)[1]


def table_column(rows: list[dict], key: str, path: Path, convert=float) -> np.ndarray:
    try:
        return np.array([convert(r[key]) for r in rows], dtype=float)
    except KeyError:
        raise CostModelError(f"{path}: no column {key!r}") from None
    except (TypeError, ValueError) as err:
        raise CostModelError(f"{path}: column {key!r}: {err}") from None


def profile_for_system(system: str) -> str:
    """The profile id a table's system id names (``a100_sxm`` -> ``a100_80gb_sxm``); an error naming the
    known ids and aliases otherwise."""
    from costmodel.hardware.catalog import load_profile, profile_index, profile_key

    if profile_key(system) not in profile_index():
        known = sorted(profile_index())
        raise CostModelError(
            f"no hardware profile for system {system!r} of a published table; known ids and aliases: {', '.join(known)}"
        )
    return load_profile(system).id


def gemm_table(fields: dict, M, N, K, measured_s, fmt: str = "bf16", **base) -> Table:
    """A table of GEMMs of M x K by K x N in ``fmt``, each as ``costmodel predict --gemm`` prices it
    (:func:`costmodel.price.gemm.gemm_op`: its class, FLOPs and bytes)."""
    from costmodel.price.gemm import gemm_op

    op, shape = gemm_op(M, N, K, fmt)
    base = {"dtype": op.dtype, **base}
    return Table(
        op_class=op.kernel, fields=fields, measured_s=measured_s, flops=op.flops, nbytes=op.bytes, shape=shape, **base
    )
