"""Validation of costmodel's predictions against real torch kernels (installed as ``costmodel.validation``).

The only part of costmodel that imports torch (the ``validation`` extra). This module itself does not:
it says how to install torch when it is missing, and runs the ``calibrate`` and ``validate`` commands.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from costmodel.core.errors import CostModelError
from costmodel.core.files import wrote

#: The datasheet profile a CPU run is compared with (a GPU's comes from its device name).
DEFAULT_CPU_PROFILE = "epyc_9004_2vcpu"
#: torch's CPU build, from torch's own package index: no CUDA packages come with it.
TORCH_CPU = "python -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"


def require_torch(command: str):
    """Import torch, or stop with one line that says how to install it."""
    try:
        import torch
    except ImportError:
        raise CostModelError(
            f"costmodel {command} needs torch: {TORCH_CPU}, then python -m pip install -e '.[validation]' in "
            "the checkout"
        ) from None
    return torch


def device_for(command: str, device: str) -> str:
    """``cpu`` or ``cuda``, checked against what torch sees."""
    torch = require_torch(command)
    device = device.lower()
    if device == "cuda" and not torch.cuda.is_available():
        raise CostModelError("--device cuda: no CUDA GPU is available to torch here; use --device cpu")
    return device


def calibrate_command(device: str, out: str, quick: bool, threads: int | None = None) -> str:
    """Measure ``device``, write the profile to ``out``; returns the lines to print."""
    device = device_for("calibrate", device)
    from costmodel.core.files import check_folder

    check_folder(out)
    from costmodel.validation.calibrate import calibrate

    profile = calibrate(device, out, quick, threads)
    peaks = ", ".join(f"{dt} {v['value'] / 1e9:.0f} GFLOP/s" for dt, v in profile["peak_flops_per_s"].items())
    line = (
        f"{'wrote ' + out + ': ' if out != '-' else ''}{profile['name']}: {peaks}; read bandwidth "
        f"{profile['memory_bandwidth_bytes_per_s']['value'] / 1e9:.1f} GB/s; per-op overhead "
        f"{profile['launch_overhead_s']['value'] * 1e6:.1f} µs"
    )
    fits = profile.get("efficiency", {}).get("error", {})
    if fits:
        line += "\nfitted curves (median |error| of the fit): " + ", ".join(
            f"{k.split('/')[0]} {v['median_abs_error_pct']:.0f}%" for k, v in fits.items()
        )
    if profile["noise"]["warning"]:
        line += "\nWarning: " + profile["noise"]["warning"]
    return line


def datasheet_profile(device: str, gpu: str | None):
    """The datasheet profile to compare with: ``gpu`` if given, else the one whose ``device_names``
    list this GPU's name (an error, never a neighbour, when none does), or the CPU default."""
    from costmodel.hardware.catalog import load_profile, profile_for_device

    if gpu is not None:
        return load_profile(gpu)
    if device == "cuda":
        import torch

        return profile_for_device(torch.cuda.get_device_name())
    return load_profile(DEFAULT_CPU_PROFILE)


def validate_command(
    device: str,
    gpu: str | None,
    profile_path: str | None,
    quick: bool,
    json_path: str | None,
    plot_path: str | None,
    progress: Callable[[list], Iterator],
    say: Callable[[str], None],
    threads: int | None = None,
    save_path: str | None = None,
    timing: str = "eager",
) -> Iterator[str]:
    """Run the validation grid; yields the lines to print (the summary, then what was written).
    Eager timing without ``profile_path`` measures the calibrated profile in the same run (``save_path``: written
    there). Graph timing (``timing="graph"``, CUDA only) holds the datasheet profile, and ``profile_path``'s if
    given, against CUDA-graph replays; it calibrates none (a calibration's fixed costs are eager calls')."""
    if timing == "graph" and device != "cuda":
        raise CostModelError(f"--timing graph replays CUDA graphs: it needs --device cuda, not --device {device}")
    if timing == "graph" and save_path is not None:
        raise CostModelError(
            "--save-profile writes the profile an eager run calibrates; --timing graph calibrates "
            "none (drop --save-profile, or time eager)"
        )
    device = device_for("validate", device)
    from costmodel.core.files import check_folder, write_text
    from costmodel.hardware.catalog import load_profile
    from costmodel.hardware.profile import HardwareProfile

    for path in (json_path, save_path):
        if path is not None:
            check_folder(path)
    if plot_path is not None:
        from costmodel.render.plots import check_output

        check_output(plot_path)  # suffix and folder
    profiles = {"datasheet": datasheet_profile(device, gpu)}
    calibration = None
    if profile_path is not None:
        profiles["calibrated"] = load_profile(profile_path)
    elif timing == "eager":
        # calibrate in the same run: the rates first, then the curves timed in the validation's own passes
        from costmodel.validation.calibrate import finish, measure_profile
        from costmodel.validation.curves import CurveRun

        say("calibrating ...")
        measured = measure_profile(device, quick, threads)
        curves = CurveRun(device, quick) if device == "cpu" else None
        calibration = (
            HardwareProfile.model_validate(measured[0]),
            curves,
            lambda: finish(device, quick, *measured, curves=curves),
        )
    from costmodel.render.papers import validation_summary
    from costmodel.validation.run import validate

    report = validate(device, profiles, quick, progress, threads, calibration, timing)
    if json_path == "-":  # standard output holds the JSON alone
        write_text(json_path, json.dumps(report, indent=1))
        json_path = None
    else:
        yield validation_summary(report)
    if report["noise"]["warning"]:
        yield "Warning: " + report["noise"]["warning"]
    if json_path is not None:
        write_text(json_path, json.dumps(report, indent=1))
        yield from wrote(json_path)
    if save_path is not None:
        from costmodel.validation.calibrate import write_profile

        write_profile(save_path, report["calibrated_profile"])
        yield from wrote(save_path)
    if plot_path is not None:
        _plot(report, plot_path, timing)
        yield from wrote(plot_path)


def _plot(report: dict, plot_path: str, timing: str) -> None:
    """The validation's predicted against measured times, per op and whole step, written to ``plot_path``."""
    from costmodel.render.plots import save
    from costmodel.render.serving_plots import draw_predicted_vs_measured

    name = "calibrated" if "calibrated" in report["summary"] else "datasheet"
    rows = [
        {"measured_s": r["measured"]["median_s"], "predicted_s": r[f"predicted_{name}_s"], "group": r["group"]}
        for r in report["rows"]
    ]
    env = report["environment"]
    title = (
        f"{env['device_name']} ({env['backend']}), torch {env['torch_version']}, {timing} timing\n"
        f"predicted ({name} profile) against measured, per op and whole step"
    )
    save(draw_predicted_vs_measured(rows, title), plot_path)


def check_outputs(json_path: str | None, plot_path: str | None) -> None:
    """Refuse a report's outputs before any work: a folder that cannot be written, a figure format matplotlib
    lacks, or both to standard output."""
    from costmodel.core.files import check_folder

    if json_path is not None:
        check_folder(json_path)
    if plot_path is not None:
        from costmodel.render.plots import check_output

        check_output(plot_path)
    if json_path == "-" and plot_path == "-":
        raise CostModelError("--json - and --plot - would both write standard output; write one to a file")


def published_command(
    folder: str | None, json_path: str | None, plot_path: str | None, without=(), fmt: str = "table"
) -> Iterator[str]:
    """Compare predictions with published GPU timings (``folder``, or the subset shipped in the package);
    the summary as a table, or (``fmt``) as CSV or markdown rows."""
    from costmodel.core.files import write_text
    from costmodel.validation.published import read_folder, shipped_folder
    from costmodel.validation.published_report import summary_table, validate_published

    check_outputs(json_path, plot_path)
    tables, skipped = read_folder(folder or shipped_folder())
    report = validate_published(tables, without)
    if json_path == "-":  # standard output holds the JSON alone
        fmt = "none"
    if fmt == "none":
        pass
    elif fmt in ("csv", "markdown"):
        from costmodel.render.records import records_csv, records_markdown

        yield (records_csv if fmt == "csv" else records_markdown)(report["summary"]).rstrip("\n")
    else:
        yield summary_table(report)
    if folder is None and fmt == "table":
        yield (
            "(the compact subset shipped in the package; pass the folder of the full tables, e.g. "
            "--published ../shared/measurements)"
        )
    if skipped and fmt == "table":
        yield f"skipped (not a published-table name): {', '.join(skipped)}"
    if json_path is not None:
        write_text(json_path, json.dumps({"rows": report["rows"], "summary": report["summary"]}, indent=None))
        yield from wrote(json_path)
    if plot_path is not None:
        from costmodel.render.plots import save
        from costmodel.render.serving_plots import draw_predicted_vs_measured

        rows = [
            {"measured_s": r["measured_s"], "predicted_s": r["predicted_s"], "group": f"{r['gpu']} {r['op_class']}"}
            for r in report["rows"]
        ]
        save(draw_predicted_vs_measured(rows, "predicted against published GPU timings"), plot_path)
        if fmt != "none":  # standard output holds the JSON alone
            yield from wrote(plot_path)
