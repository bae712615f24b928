"""Figures: the data they draw equals the model's numbers; files in each format; errors."""

from __future__ import annotations

import os

import matplotlib
import pytest
from click.testing import CliRunner

from costmodel.attention.figures import memory_limits, roofline_points
from costmodel.attention.roofline import predict
from costmodel.attention.sweeps import check_sweep, sweep
from costmodel.attention.workload import Workload
from costmodel.cli.commands import main
from costmodel.hardware.catalog import load_profile
from costmodel.render.plots import draw_roofline, draw_sweep
from costmodel.render.serving_plots import draw_predicted_vs_measured

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def artists(fig, prefix: str) -> dict:
    return {line.get_gid(): line for ax in fig.axes for line in ax.lines if (line.get_gid() or "").startswith(prefix)}


def test_roofline_markers_sit_at_the_model_numbers():
    a100, h100 = load_profile("a100"), load_profile("h100")
    workloads = [Workload.create(v, mode) for v in ("mha", "gqa", "mqa") for mode in ("incremental", "batched")]
    fig = draw_roofline([a100, h100], workloads, "test", roofline_points(a100, workloads))
    markers = artists(fig, "op:")
    count = 0
    for w in workloads:
        for op in predict(w, a100).ops:
            if op.flops == 0:
                assert f"op:{w.variant}:{w.mode}:{op.name}" not in markers  # no place on a log axis
                continue
            line = markers[f"op:{w.variant}:{w.mode}:{op.name}"]
            intensity = op.flops / op.bytes
            assert line.get_xdata()[0] == pytest.approx(intensity)
            assert line.get_ydata()[0] == pytest.approx(min(312e12, intensity * 2.039e12))
            count += 1
    # decode: q, k, v, logits, scale, softmax, w_sum, out; prefill adds the mask; x 3 variants
    assert len(markers) == count == 3 * (8 + 9)


def test_roofline_knees_are_the_ridge_points():
    hws = [load_profile("a100"), load_profile("h100")]
    fig = draw_roofline(hws, [Workload.create("mha")], "test", roofline_points(hws[0], [Workload.create("mha")]))
    for hw in hws:
        ridge = artists(fig, f"ridge:{hw.id}")[f"ridge:{hw.id}"]
        assert ridge.get_xdata()[0] == pytest.approx(hw.peak("bf16") / hw.bandwidth)
        memory = artists(fig, f"memory_roof:{hw.id}")[f"memory_roof:{hw.id}"]
        (x0, x1), (y0, y1) = memory.get_xdata(), memory.get_ydata()
        assert y0 / x0 == pytest.approx(hw.bandwidth) and x1 == pytest.approx(ridge.get_xdata()[0])
        assert y1 == pytest.approx(hw.peak("bf16"))
        compute = artists(fig, f"compute_roof:{hw.id}")[f"compute_roof:{hw.id}"]
        assert set(compute.get_ydata()) == {hw.peak("bf16")}


@pytest.mark.parametrize("name,values", [("context", [2**i for i in range(7, 18)]), ("batch", [1, 4, 16, 64, 256])])
def test_memory_limit_mark_is_where_memory_runs_out(name, values):
    hw = load_profile("h100")
    workloads = [Workload.create(v, layers=32) for v in ("mha", "gqa", "mqa")]
    dim, linked = check_sweep(workloads, name, values)
    records = sweep(workloads, hw, name, values).records
    fig = draw_sweep(hw, workloads, name, dim, values, records, memory_limits(hw, workloads, dim, values), "t")
    marks = artists(fig, "memory_limit:")
    field = "m" if name == "context" else "b"
    for w in workloads:
        fits_at_end = predict(w.model_copy(update={field: values[-1]}), hw).memory.fits
        key = f"memory_limit:{w.variant}:time_s"
        if fits_at_end:
            assert key not in marks
            continue
        x = marks[key].get_xdata()[0]
        # the prediction fits at x and not one step beyond
        assert predict(w.model_copy(update={field: int(x)}), hw).memory.fits
        assert not predict(w.model_copy(update={field: int(x) + 1}), hw).memory.fits
        assert marks[key].get_ydata()[0] == pytest.approx(
            predict(w.model_copy(update={field: int(x)}), hw).total.time_s * 1e3
        )
    assert "memory_limit:mha:time_s" in marks


def test_predicted_vs_measured_draws_identity_band_and_points():
    rows = [
        {"measured_s": 1e-5, "predicted_s": 1.1e-5, "group": "a"},
        {"measured_s": 2e-4, "predicted_s": 1.5e-4, "group": "b"},
    ]
    fig = draw_predicted_vs_measured(rows, "t")
    ax = fig.axes[0]
    identity = artists(fig, "identity")["identity"]
    assert list(identity.get_xdata()) == pytest.approx(list(identity.get_ydata()))
    band = next(c for c in ax.collections if c.get_gid() == "band")
    verts = band.get_paths()[0].vertices
    xs, ys = verts[:, 0], verts[:, 1]
    assert max(ys / xs) == pytest.approx(1.2) and min(ys / xs) == pytest.approx(0.8)
    points = artists(fig, "points:")
    assert points["points:b"].get_xdata()[0] == 2e-4 and points["points:b"].get_ydata()[0] == 1.5e-4


MAGIC = {".png": b"\x89PNG", ".svg": b"<?xml", ".pdf": b"%PDF"}


@pytest.mark.parametrize("suffix", list(MAGIC))
def test_files_in_each_format(tmp_path, suffix):
    roof, swp = tmp_path / f"roof{suffix}", tmp_path / f"sweep{suffix}"
    r1 = CliRunner().invoke(main, ["roofline", "--gpu", "a100", "--gpu", "tpu-v5e", "--out", str(roof)])
    r2 = CliRunner().invoke(
        main,
        [
            "sweep",
            "--gpu",
            "h100",
            "--x",
            "batch",
            "--range",
            "1:256:x4",
            "--out",
            str(swp),
            "--csv",
            str(tmp_path / "s.csv"),
        ],
    )
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    assert roof.read_bytes().startswith(MAGIC[suffix]) and swp.read_bytes().startswith(MAGIC[suffix])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([roof.name, swp.name, "s.csv"])
    umask = os.umask(0)
    os.umask(umask)
    assert roof.stat().st_mode & 0o777 == 0o666 & ~umask  # not the private mode of a temporary file


@pytest.mark.parametrize(
    "args,expected",
    [
        (["roofline", "--gpu", "a100", "--out", "r.jpg"], "the suffix must be one of .png, .svg, .pdf"),
        (["roofline", "--gpu", "a10o", "--out", "r.png"], "did you mean a10g"),
        (["roofline", "--gpu", "a100", "--groups", "3", "--out", "r.png"], "groups 3 must divide heads 32"),
        (
            ["sweep", "--gpu", "h100", "--x", "groups", "--variant", "mha", "--range", "1,2", "--out", "s.png"],
            "sweeping groups needs variant gqa",
        ),
        (
            ["sweep", "--gpu", "h100", "--x", "groups", "--range", "1,3", "--out", "s.png"],
            "groups [3] do not divide heads 32",
        ),
        (["sweep", "--gpu", "h100", "--x", "context", "--range", "10:1:x", "--out", "s.png"], "invalid range"),
        (
            ["sweep", "--gpu", "h100", "--x", "context", "--mode", "generate", "--range", "1,2", "--out", "s.png"],
            "generate mode has no context to sweep",
        ),
        (["sweep", "--gpu", "h100", "--x", "width", "--range", "1,2", "--out", "s.png"], "'width' is not one of"),
    ],
)
def test_plot_errors(tmp_path, monkeypatch, args, expected):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and expected in errors[0], result.output
    assert list(tmp_path.iterdir()) == []


def test_sweep_figure_shades_each_variants_range_at_the_model_numbers():
    hw = load_profile("a100")
    workloads = [Workload.create(v) for v in ("mha", "mqa")]
    values = [512, 2048, 8192]
    dim, _ = check_sweep(workloads, "context", values)
    records = sweep(workloads, hw, "context", values).records
    fig = draw_sweep(hw, workloads, "context", dim, values, records, memory_limits(hw, workloads, dim, values), "t")
    for w in workloads:
        shade = next(c for ax in fig.axes for c in ax.collections if c.get_gid() == f"band:{w.variant}:time_s")
        ys = shade.get_paths()[0].vertices[:, 1]
        one = predict(w.model_copy(update={"m": 2048}), hw).total.band
        assert min(abs(ys - one.low_s * 1e3)) < 1e-9 and min(abs(ys - one.high_s * 1e3)) < 1e-9


def test_throughput_latency_figure_draws_each_points_latency_range():
    from costmodel.model.presets import load_model
    from costmodel.model.requests import model_sweep, request
    from costmodel.render.serving_plots import draw_throughput_latency

    m, hw = load_model("llama-3-8b"), load_profile("h100")
    records = model_sweep([m], [hw], "batch", [1, 8], input_len=512, output_len=32)
    fig = draw_throughput_latency(records, "batch")
    bars = next(c for c in fig.axes[0].collections if (c.get_gid() or "").startswith("band:"))
    segments = bars.get_segments()
    one = request(m, hw, batch=8, input_len=512, output_len=32)
    assert any(
        s[0][0] == pytest.approx(one.tpot_band.low_s * 1e3) and s[1][0] == pytest.approx(one.tpot_band.high_s * 1e3)
        for s in segments
    )
