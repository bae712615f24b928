"""Fit the efficiency mechanisms of the A100, H100 and B200 profiles to the published timings, write the fitted
blocks into the profiles, and report how well a fit on one GPU predicts another through the transfer rule (A100 and
H100 both ways, H100 and B200 both ways: each scored on a GPU that fit did not see).

    python scripts/fit_published.py [MEASUREMENTS_DIR] [--gpus=a100_80gb_sxm,h100_sxm,b200] [--write] [--holdout]

It also prints the measured ratio of the A100 GEMM shapes that two sources both timed (Vidur over
aiconfigurator), which shows how far the tables themselves disagree.

MEASUREMENTS_DIR defaults to ../shared/measurements; --gpus fits (and writes) those profiles only. Without
--write the profiles are left alone and
only the errors are printed. --holdout also fits on every other row of each table and reports the error
on the rows that fit did not see. The fitted numbers depend only on the data (the search is deterministic).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from costmodel.hardware.catalog import load_profile
from costmodel.hardware.mechanisms import FALLBACK
from costmodel.hardware.profile import ClassEfficiency, Efficiency
from costmodel.price.transfer import carried, transfer
from costmodel.validation.fit import SHARED, errors, fit_class, predict_table, unfitted_write_s
from costmodel.validation.moe_layers import TABLES as MOE_TABLES
from costmodel.validation.moe_layers import errors as moe_errors
from costmodel.validation.moe_layers import fit_moe_class, moe_class, read_tables, with_class, with_classes
from costmodel.validation.published import read_folder

ROOT = Path(__file__).resolve().parent.parent
#: (table system id, profile) of every GPU with published tables, and the source commits.
GPUS = {"a100_80gb_sxm": ("a100_sxm", "a100", "A100"), "h100_sxm": ("h100_sxm",), "b200": ("b200_sxm",)}
COMMITS = {
    "aiconfigurator": "ai-dynamo/aiconfigurator@095f58a",
    "vidur": "microsoft/vidur@7d47513",
    "llmcompass": "PrincetonUniversity/LLMCompass@2e015fd",
}
#: The table each class's shape parameters are fitted on; the other timings fit only their fixed cost.
PRIMARY = {
    "gemm": "aiconfigurator",
    "gemm_fp8": "aiconfigurator",
    "gemm_fp8_block": "aiconfigurator",
    "gemm_nvfp4": "aiconfigurator",
    "decode_attention": "aiconfigurator",
    "prefill_attention": "aiconfigurator",
    "norm": "vidur",
    "elementwise": "vidur",
    "activation": "vidur",
    "rotary": "vidur",
    "softmax": "llmcompass",
    "layernorm": "llmcompass",
}
METHOD = (
    "least squares on log(predicted/measured), Levenberg-Marquardt from 3 starts, "
    "scripts/fit_published.py; shape parameters on the primary source of each class "
    "(aiconfigurator for GEMM and attention, Vidur for RMSNorm and elementwise ops, LLMCompass for "
    "torch's softmax and LayerNorm), then each other "
    "timing convention's fixed cost alone; a class's parameters are fitted on the rows its kernel runs "
    "(one-token prefills run the decode kernel and count with decode attention); a kernel's discrete behaviour "
    "is chosen by fitting each way and keeping the smaller error: split_kv (always or grouped) for decode "
    "attention (grouped: FlashAttention-2's split heuristic, its combine reading the splits in turn at "
    "combine_split_s each), for prefill attention whether the call writes the cache (where the engine "
    "version's timed call holds the write: costmodel.validation.published) and whether a tile packs a group's "
    "query heads, "
    "and for the low-precision GEMMs whether the layer quantizes its input in a kernel of "
    "its own; per-tensor fp8 GEMMs take the bf16 GEMM's memory curve (validation.fit.SHARED) and "
    "run the tile the device's kernel facts dispatch; the MoE kernel classes (moe, moe_fp8, ...) take the "
    "device's dense class of the same weights and fit compute_efficiency and the bandwidth curve (ceiling, "
    "half-bandwidth size, exponent) on the whole measured MoE layer (router, expert GEMMs, activation, "
    "combine; costmodel.validation.moe_layers) under a soft-L1 loss of scale 0.1 (a layer timed at several "
    "times its neighbours weighs as one row), in the tile the engine's configuration gives where the "
    "device's grouped kernel fixes it (kernels.grouped_dispatch)"
)


def fit_device(tables, hw, moe_tables=()):
    """The classes of one device fitted on its tables, and each fit's error; then its MoE kernel classes on its
    measured MoE layers (``moe_tables``, :func:`costmodel.validation.moe_layers.fit_moe_class`), around the dense
    classes just fitted."""
    classes, report = {}, {}
    for cls, source in PRIMARY.items():
        primary = [t for t in tables if t.priced_class == cls and t.source == source]
        if not primary:
            continue
        start = None
        if cls in SHARED and SHARED[cls][0] in classes:
            parent, names = SHARED[cls]
            start = ClassEfficiency(**{n: getattr(classes[parent], n) for n in names})
        eff = fit_class(primary, hw, start=start)
        report[f"{cls}/{primary[0].timing}"] = _err(primary, hw, eff)
        for other in sorted({t.source for t in tables if t.priced_class == cls} - {source}):
            ts = [t for t in tables if t.priced_class == cls and t.source == other]
            eff = fit_class(ts, hw, names=("fixed",), start=eff, starts=1)
            report[f"{cls}/{ts[0].timing}"] = _err(ts, hw, eff)
        classes[cls] = eff
    if moe_tables:
        dense = with_classes(hw, classes)
        for cls in sorted({moe_class(t) for t in moe_tables}):
            mine = [t for t in moe_tables if moe_class(t) == cls]
            if FALLBACK[cls] not in classes:
                continue
            classes[cls] = written(fit_moe_class(mine, dense))
            report[f"{cls}/graph"] = {
                k: v for k, v in moe_errors(mine, with_class(dense, cls, classes[cls])).items() if k != "median_ratio"
            }
    return classes, report


def _stored(v: float) -> float:
    """A fitted number as a profile stores it: four significant digits."""
    return float(f"{v:.4g}")


def written(eff: ClassEfficiency) -> ClassEfficiency:
    """``eff`` with its numbers as a profile stores them (:func:`to_yaml`), so that the error a profile states is the
    error of the numbers it holds."""
    update = {k: _stored(v) for k, v in eff.model_dump().items() if isinstance(v, float)}
    return eff.model_copy(update=update | {"fixed_s": {k: _stored(v) for k, v in eff.fixed_s.items()}})


def _err(tables, hw, eff, gemm=None):
    """Errors of ``eff`` on ``tables``; a call holding a cache write ``eff`` does not price also pays it, a small
    kernel beside ``gemm`` (costmodel.validation.fit.unfitted_write_s)."""
    pred = np.concatenate([predict_table(t, hw, eff) + unfitted_write_s(t, hw, eff, gemm) for t in tables])
    return errors(pred, np.concatenate([t.measured_s for t in tables]))


def block(classes, report, tables, moe_file=None) -> Efficiency:
    data = sorted({f"{t.source} ({COMMITS[t.source]}) {t.gpu} {t.file} [{t.timing}]" for t in tables})
    if moe_file:
        data.append(
            f"aiconfigurator ({COMMITS['aiconfigurator']}) {Path(moe_file).name} balanced routing, tp and ep "
            "up to 8 [graph]"
        )
    return Efficiency(data=tuple(data), method=METHOD, error=report, classes=classes)


def to_yaml(eff: Efficiency) -> str:
    import yaml

    dump = eff.model_dump(mode="json")
    default = ClassEfficiency().model_dump(mode="json")
    for c in dump["classes"].values():
        for k, v in list(c.items()):
            if k not in ("fixed_s", "fitted") and k not in c["fitted"] and v == default[k]:
                del c[k]  # a mechanism this class does not use
            elif isinstance(v, float):
                c[k] = _stored(v)
        c["fixed_s"] = {k: _stored(v) for k, v in c["fixed_s"].items()}
        c["fitted"] = list(c["fitted"])
    text = yaml.safe_dump({"efficiency": dump}, sort_keys=False, width=110)
    return (
        "# Fitted, not datasheet: the parameters of costmodel.hardware.mechanisms, fitted to the published timings\n"
        "# named in `data` by the method in `method`; `error` is the fit's error on that data.\n" + text
    )


def write(profile_id: str, eff: Efficiency) -> None:
    path = ROOT / "hardware_profiles" / f"{profile_id}.yaml"
    text = path.read_text(encoding="utf-8")
    # the efficiency block runs from its comment to the next fitted block (the collectives) or the end
    start = text.find(EFFICIENCY_MARK)
    if start >= 0:
        end = text.find("\n# Fitted, not datasheet:", start + 1)
        rest = text[end + 1 :] if end >= 0 else ""
        text = text[:start].rstrip("\n") + "\n" + to_yaml(eff) + rest
    else:
        text = text.rstrip("\n") + "\n" + to_yaml(eff)
    path.write_text(text, encoding="utf-8")


EFFICIENCY_MARK = "# Fitted, not datasheet: the parameters of costmodel.hardware.mechanisms"


def cross(tables_by_gpu, fitted, hws):
    """Fit on one GPU, predict the other through the transfer rule (decode attention split as the other GPU's own
    kernel splits it: costmodel.price.origin.carried)."""
    lines = []
    pairs = [
        (a, b)
        for a, b in (
            ("a100_80gb_sxm", "h100_sxm"),
            ("h100_sxm", "a100_80gb_sxm"),
            ("h100_sxm", "b200"),
            ("b200", "h100_sxm"),
        )
        if a in fitted and b in fitted
    ]
    for src, dst in pairs:
        for cls in ("decode_attention", "gemm", "gemm_fp8", "gemm_fp8_block", "prefill_attention"):
            if cls not in fitted[src] or cls not in fitted[dst]:
                continue
            gemm = fitted[src].get("gemm")
            eff = carried(fitted[src][cls], hws[src], hws[dst], cls, gemm=gemm)
            ts = [t for t in tables_by_gpu[dst] if t.priced_class == cls and t.source == "aiconfigurator"]
            own = _err(ts, hws[dst], fitted[dst][cls])
            # a held-out cache write's small kernel: the GEMM class carried as the rule carries it
            got = _err(ts, hws[dst], eff, transfer(gemm, hws[src], hws[dst], "gemm") if gemm is not None else None)
            lines.append(
                f"{cls:18s} fit on {src:14s} -> {dst:14s}: median {got['median_abs_error_pct']:5.1f}% "
                f"p90 {got['p90_abs_error_pct']:5.1f}%  (fit on {dst} itself: median "
                f"{own['median_abs_error_pct']:.1f}%, p90 {own['p90_abs_error_pct']:.1f}%; n {got['n']})"
            )
    return lines


def moe_cross(moe, fitted, hws):
    """A MoE class fitted on one GPU's layers, scored on the other's through the transfer rule, beside the other
    GPU's own dense class (what it prices MoE layers with without a MoE fit) and its own MoE fit."""
    lines = []
    for src, dst in (("h100_sxm", "b200"), ("b200", "h100_sxm")):
        if src not in moe or dst not in moe:
            continue
        for cls in sorted({moe_class(t) for t in moe[dst]}):
            if cls not in fitted[src] or cls not in fitted[dst]:
                continue
            ts = [t for t in moe[dst] if moe_class(t) == cls]
            own = {c: e for c, e in fitted[dst].items() if c != cls}
            base = with_classes(hws[dst], own)
            got = moe_errors(ts, with_class(base, cls, transfer(fitted[src][cls], hws[src], hws[dst], cls)))
            dense = moe_errors(ts, base)
            mine = moe_errors(ts, with_class(base, cls, fitted[dst][cls]))
            lines.append(
                f"{cls:18s} fit on {src:14s} -> {dst:14s}: median {got['median_abs_error_pct']:5.1f}% "
                f"p90 {got['p90_abs_error_pct']:5.1f}%  ({dst}'s dense class: median "
                f"{dense['median_abs_error_pct']:.1f}%; fit on {dst} itself: median "
                f"{mine['median_abs_error_pct']:.1f}%, p90 {mine['p90_abs_error_pct']:.1f}%; n {got['n']})"
            )
    return lines


def same_shapes(tables):
    """Two sources' timings of the same GEMM shapes on the same GPU model (A100 80GB): the measured ratio
    per FLOP bin, with no prediction in between."""
    gemm = lambda source: [  # noqa: E731
        t for t in tables if t.source == source and t.priced_class == "gemm" and t.profile == "a100_80gb_sxm"
    ]
    aic = {
        (int(M), int(K), int(N)): s
        for t in gemm("aiconfigurator")
        for M, K, N, s in zip(t.shape["M"], t.shape["K"], t.shape["N"], t.measured_s)
    }
    pairs = [
        (2 * M * K * N, s / aic[(M, K, N)])
        for t in gemm("vidur")
        for M, K, N, s in zip(*(t.shape[k].astype(int) for k in "MKN"), t.measured_s)
        if (M, K, N) in aic
    ]
    if not pairs:
        return []
    flops, ratio = map(np.array, zip(*pairs))
    lines = []
    for lo, hi in ((0, 1e9), (1e9, 1e10), (1e10, 1e11), (1e11, np.inf)):
        r = ratio[(flops >= lo) & (flops < hi)]
        if r.size:
            p10, p50, p90 = np.percentile(r, [10, 50, 90])
            lines.append(
                f"{lo:8.0e} - {hi:8.0e} FLOPs: n {r.size:4d}  vidur / aiconfigurator median {p50:.2f} "
                f"(p10 {p10:.2f}, p90 {p90:.2f})"
            )
    return lines


def main(argv):
    folder = next((a for a in argv if not a.startswith("--")), str(ROOT.parent / "shared" / "measurements"))
    tables, _ = read_folder(folder, engines=("vllm",))  # the kernels these fits are of
    chosen = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--gpus=")), list(GPUS))
    by_gpu = {pid: [t for t in tables if t.profile == pid] for pid in GPUS if pid in chosen}
    # datasheet profiles without any fitted block: the fit must not depend on what was fitted before
    hws = {pid: load_profile(pid).model_copy(update={"efficiency": None}) for pid in by_gpu}
    fitted, blocks = {}, {}
    moe_files = {
        pid: Path(folder) / MOE_TABLES[pid]
        for pid in by_gpu
        if pid in MOE_TABLES and (Path(folder) / MOE_TABLES[pid]).is_file()
    }
    moe = {pid: read_tables(path, distributions=("balanced",)) for pid, path in moe_files.items()}
    for pid in by_gpu:
        classes, report = fit_device(by_gpu[pid], hws[pid], moe.get(pid, ()))
        # the profile's explanations of values at a search bound are kept (they are prose, not fitted)
        old = load_profile(pid).efficiency
        classes = {
            c: e.model_copy(update={"at_bound": old.classes[c].at_bound})
            if old is not None and c in old.classes and old.classes[c].at_bound
            else e
            for c, e in classes.items()
        }
        fitted[pid] = classes
        blocks[pid] = block(classes, report, by_gpu[pid], moe_files.get(pid))
        print(f"{pid}: {blocks[pid].parameters} fitted parameters")
        for key, e in report.items():
            print(
                f"  {key:28s} n {e['n']:6d}  median {e['median_abs_error_pct']:5.1f}%  p90 {e['p90_abs_error_pct']:5.1f}%"
            )
    print("\ncross-GPU (transfer rule: costmodel.price.origin.TRANSFER_RULE):")
    for line in cross(by_gpu, fitted, hws) + moe_cross(moe, fitted, hws):
        print("  " + line)
    print("\nthe same A100 GEMM shapes timed by two sources (measured over measured, kernels vs graph timing):")
    for line in same_shapes(tables):
        print("  " + line)
    if "--holdout" in argv:
        print("\nheld out (fit on even rows of every table, error on the odd rows it did not see):")
        for pid in by_gpu:
            half = lambda t, r: t.select(np.arange(len(t)) % 2 == r)  # noqa: E731
            classes, _ = fit_device([half(t, 0) for t in by_gpu[pid]], hws[pid])
            for cls, eff in classes.items():
                for source in sorted({t.source for t in by_gpu[pid] if t.priced_class == cls}):
                    test = [half(t, 1) for t in by_gpu[pid] if t.priced_class == cls and t.source == source]
                    e = _err(test, hws[pid], eff)
                    key = f"{cls}/{test[0].timing}"
                    print(
                        f"  {pid:14s} {key:28s} {source:15s} n {e['n']:6d}  median "
                        f"{e['median_abs_error_pct']:5.1f}%  p90 {e['p90_abs_error_pct']:5.1f}%"
                    )
    if "--write" in argv:
        for pid, eff in blocks.items():
            write(pid, eff)
            print(f"wrote the efficiency block of hardware_profiles/{pid}.yaml")


if __name__ == "__main__":
    main(sys.argv[1:])
