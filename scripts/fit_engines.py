"""Fit the H100's kernel classes of SGLang and TensorRT-LLM on their own timed kernels, and report what each engine's
classes gain over vLLM's, in-sample, on held-out rows and leave one engine out.

    python scripts/fit_engines.py [MEASUREMENTS_DIR] [--write]

Reads ``aiconfigurator/engines/h100_sxm/`` (SGLang 0.5.9, TensorRT-LLM 1.2.0rc5) and the vLLM 0.19 tables beside
it. Per engine and class (:data:`CLASSES`): the error of vLLM's fitted H100 class on the engine's rows (no fit saw
them), of the engine's own fit on its rows (in-sample), of a fit on the even rows on the odd ones (held out), and of
a fit on the other two engines' rows pooled on this one's (leave one engine out). An engine keeps a class of its own
where its held-out median beats vLLM's class by :data:`GAIN` points and no fitted value sits at a bound of its search
but the limits of the form (:data:`LIMITS`, stated in the class); the rest it prices with vLLM's. --write stores the kept classes in the ``engine_kernels`` block of the H100 profile.
The fits are deterministic; the whole run takes a few minutes on two cores.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fit_published import COMMITS, ROOT, _err, fit_device, written  # noqa: E402

from costmodel.hardware.catalog import load_profile  # noqa: E402
from costmodel.hardware.profile import ClassEfficiency  # noqa: E402
from costmodel.validation.fit import BOUNDS, fit_class  # noqa: E402
from costmodel.validation.published import read_folder  # noqa: E402

#: The classes an engine may have its own of (its attention backends and its low-precision GEMMs); the bf16 GEMMs
#: are cuBLAS in all three engines.
CLASSES = ("gemm_fp8", "gemm_fp8_block", "decode_attention", "prefill_attention")
ENGINES = ("vllm", "sglang", "trtllm")
#: How much better (median |error|, points) an engine's own class must do on held-out rows to be kept.
GAIN = 2.0
#: The kept classes a served prediction of the engine runs, and why: each class on its own against the engine's
#: measured deployments (costmodel validate --serving on ../shared/measurements/serving/silicon_sample_h100_sxm.csv,
#: medians; before: vLLM's class). The others price the engine's kernels one by one (validate --published,
#: predict --kernels) but not its served runs, where they would make its TPOTs worse.
SERVED = {
    "sglang": (
        ("decode_attention",),
        "decode attention alone: Qwen3-32B TPOT 4.5% -> 4.4%, DeepSeek-R1 (disaggregated) 14.1% -> 13.3%; the "
        "block-scaled fp8 GEMM with it makes DeepSeek-R1's TPOT 29.8% (predicted too fast: measured/predicted 1.18)",
    ),
    "trtllm": (
        (),
        "prefill attention and the fp8 GEMM make TPOT worse on every model: Qwen3-32B 4.5% -> 8.2%, Qwen3-235B-FP8 "
        "8.2% -> 14.5% (predicted too slow), and refitting the host time (scripts/fit_host_time.py) leaves them at "
        "7.9% and 15.2%",
    ),
}
METHOD = (
    "scripts/fit_engines.py: each class fitted as scripts/fit_published.py fits it, on the engine's own H100 rows "
    "(aiconfigurator's collectors for the engine); kept where its held-out median (fit on even rows, scored on odd "
    f"ones) beats vLLM's fitted class on the same rows by {GAIN:g} points and no fitted value sits at a bound but "
    "the limits of the form (the dense peak, the datasheet bandwidth, the sharpest ramp), stated in at_bound"
)


#: Values at a bound of the search that are the limit of the mechanism's form, not a sign: the dense peak, the
#: datasheet bandwidth, the sharpest ramp the bandwidth curve has. Each is stated in the class's ``at_bound``.
LIMITS = {
    "compute_efficiency": "at the dense peak: the kernel reaches the datasheet's tensor rate on these shapes, the "
    "form's limit",
    "bandwidth_ceiling": "at the datasheet bandwidth, the form's limit: the kernel streams at the full rate",
    "bandwidth_exponent": "the sharpest ramp the bandwidth curve's form has, its limit: the kernel reaches its "
    "ceiling over a short span of sizes",
}


def pinned(eff: ClassEfficiency) -> list[str]:
    """The fitted values of ``eff`` at a bound of their search (tests/test_profile_errors.py's check)."""
    out = []
    for name in eff.fitted:
        if name not in BOUNDS:
            continue
        lo, hi, _ = BOUNDS[name]
        values = list(eff.fixed_s.values()) if name == "fixed" else [getattr(eff, name)]
        at_low = lambda v: v <= 1e-15 if lo == 0 else abs(v / lo - 1) <= 1e-6  # noqa: E731
        if any(v is not None and (at_low(v) or abs(v / hi - 1) <= 1e-6) for v in values):
            out.append(name)
    return out


def settled(eff: ClassEfficiency) -> tuple[ClassEfficiency, list[str]]:
    """``eff`` with its pinned values settled: a mechanism driven to its default (absent) is no longer counted as
    fitted, a limit of the form (:data:`LIMITS`) is explained in ``at_bound``; and the pinned values that are
    neither (a sign that the form does not describe the kernel)."""
    default, signs, why, fitted = ClassEfficiency(), [], {}, list(eff.fitted)
    for name in pinned(eff):
        if name != "fixed" and getattr(eff, name) == getattr(default, name):
            fitted.remove(name)
        elif name in LIMITS and getattr(eff, name) == BOUNDS[name][1]:
            why[name] = LIMITS[name]
        else:
            signs.append(name)
    return eff.model_copy(update={"fitted": tuple(fitted), "at_bound": why}), signs


def _half(t, r):
    return t.select(np.arange(len(t)) % 2 == r)


def _line(e) -> str:
    return f"{e['median_abs_error_pct']:5.1f}% / {e['p90_abs_error_pct']:5.1f}%"


def main(argv):
    folder = Path(next((a for a in argv if not a.startswith("--")), str(ROOT.parent / "shared" / "measurements")))
    aic = folder / "aiconfigurator"
    tables = [t for t in read_folder(aic)[0] if t.profile == "h100_sxm" and t.engine in ENGINES]
    bare = load_profile("h100_sxm").model_copy(update={"efficiency": None})
    vllm = load_profile("h100_sxm").efficiency.classes
    fitted = {e: fit_device([t for t in tables if t.engine == e], bare)[0] for e in ENGINES if e != "vllm"}
    kept, errors = {}, {}
    print("class              engine   n       vLLM's class      own, in-sample    own, held out     others' fit")
    for cls in CLASSES:
        for eng in ENGINES:
            mine = [t for t in tables if t.engine == eng and t.priced_class == cls]
            if not mine:
                continue
            theirs = _err(mine, bare, vllm[cls])
            others = [t for t in tables if t.engine != eng and t.priced_class == cls]
            loeo = _err(mine, bare, fit_class(others, bare))
            if eng == "vllm":
                print(
                    f"{cls:18s} {eng:7s} {theirs['n']:6d}  {_line(theirs)}  (fitted on)        -                 {_line(loeo)}"
                )
                continue
            own, signs = settled(fitted[eng][cls])
            held = fit_class([_half(t, 0) for t in mine], bare)
            out = _err([_half(t, 1) for t in mine], bare, held)
            odd = _err([_half(t, 1) for t in mine], bare, vllm[cls])
            keep = out["median_abs_error_pct"] + GAIN <= odd["median_abs_error_pct"] and not signs
            why = "kept" if keep else "vLLM's" + (f" (pinned: {', '.join(signs)})" if signs else " (no gain)")
            print(
                f"{cls:18s} {eng:7s} {theirs['n']:6d}  {_line(theirs)}  {_line(_err(mine, bare, own))}  "
                f"{_line(out)}  {_line(loeo)}  {why}"
            )
            if keep:
                kept.setdefault(eng, {})[cls] = written(own)
                errors.setdefault(eng, {})[f"{cls}/graph"] = _err(mine, bare, written(own))
    if "--write" in argv:
        write(kept, errors, tables)


def write(kept: dict, errors: dict, tables) -> None:
    """The kept classes as the H100 profile's ``engine_kernels`` block (its data, method and in-sample error)."""
    import yaml
    from fit_published import to_yaml  # noqa: F401  (the same number format)

    block = {}
    for eng, classes in kept.items():
        data = sorted(
            {
                f"aiconfigurator ({COMMITS['aiconfigurator']}) {t.gpu} {t.file} [{t.timing}]"
                for t in tables
                if t.engine == eng
            }
        )
        served, why = SERVED.get(eng, ((), ""))
        block[eng] = {
            "data": data,
            "method": METHOD,
            "error": errors[eng],
            "classes": {c: _plain(e) for c, e in classes.items()},
            "served": [c for c in served if c in classes],
            "served_why": why,
        }
    path = ROOT / "hardware_profiles" / "h100_sxm.yaml"
    text = path.read_text(encoding="utf-8")
    mark = "\n# Fitted, not datasheet: the kernel classes of other engines"
    start = text.find(mark)
    if start >= 0:
        end = text.find("\n# Fitted, not datasheet:", start + 1)
        text = text[:start] + (text[end:] if end >= 0 else "\n")
    body = yaml.safe_dump({"engine_kernels": block}, sort_keys=False, width=110)
    text = (
        text.rstrip("\n")
        + mark
        + " (scripts/fit_engines.py), each on its own timed kernels;\n# the classes not here run vLLM's.\n"
        + body
    )
    path.write_text(text, encoding="utf-8")
    print("wrote the engine_kernels block of hardware_profiles/h100_sxm.yaml")


def _plain(eff: ClassEfficiency) -> dict:
    default = ClassEfficiency().model_dump(mode="json")
    out = {}
    for k, v in eff.model_dump(mode="json").items():
        if k in ("fixed_s", "fitted") or k in eff.fitted or v != default[k]:
            out[k] = list(v) if k == "fitted" else v
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
