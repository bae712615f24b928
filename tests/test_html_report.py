"""`costmodel predict|capacity|plan --html FILE`: one self-contained page whose JSON is the command's `--json`, whose table is its
table, whose command gives the same numbers again, whose charts are inline SVG, and which fetches nothing."""

from __future__ import annotations

import base64
import html
import json
import re
import shlex

import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main

CASES = [
    ["predict", "--gpu", "a100", "--variant", "gqa"],
    ["predict", "--gpu", "a100", "--gpu", "h100", "--batch", "8"],
    ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--tp", "2", "--context", "2048"],
    ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--input-len", "512", "--output-len", "32"],
    [
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3-8b",
        "--engine",
        "sglang",
        "--concurrency",
        "4",
        "--input-len",
        "256",
        "--output-len",
        "16",
        "--num-requests",
        "8",
    ],
    [
        "capacity",
        "--gpu",
        "h100",
        "--model",
        "llama-3-8b",
        "--input-len",
        "512",
        "--output-len",
        "64",
        "--tpot-ms",
        "30",
    ],
    [
        "plan",
        "--gpu",
        "h100",
        "--model",
        "llama-3-8b",
        "--gpus",
        "2",
        "--input-len",
        "512",
        "--output-len",
        "64",
        "--tpot-ms",
        "30",
        "--max-concurrency",
        "16",
    ],
    ["derive", "--variant", "mla", "--mode", "generate", "--asymptotic"],  # counts and forms: a table, no chart
]


def _run(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return result.output


def _between(text: str, pattern: str) -> str:
    return re.search(pattern, text, re.S).group(1)


@pytest.mark.parametrize("args", CASES, ids=[" ".join(a[:6]) for a in CASES])
def test_page_carries_the_commands_json_csv_table_and_command(tmp_path, args):
    out = tmp_path / "report.html"
    _run([*args, "--html", str(out)])
    page = out.read_text(encoding="utf-8")
    data = json.loads(_between(page, r'<script type="application/json" id="data">(.*?)</script>').replace("<\\/", "</"))
    assert data == json.loads(_run([*args, "--json"]))
    table = html.unescape(_between(page, r'<pre id="table">(.*?)</pre>'))
    assert table == _run(args)
    command = shlex.split(html.unescape(_between(page, r'<code id="command">(.*?)</code>')))
    assert command[0] == "costmodel" and json.loads(_run([*command[1:], "--json"])) == data
    csv = base64.b64decode(_between(page, r'download="costmodel.csv" href="data:text/csv;base64,([^"]+)"'))
    # the rows the command prints as CSV (CSV ends its lines in CRLF; click's test runner shows LF)
    assert csv.decode("utf-8").replace("\r\n", "\n") == _run([*args, "--format", "csv"])
    assert ("<svg" in page) == (args[0] != "derive")
    # nothing is fetched: no external script, style, image or link target (outside the inline scripts' code, where
    # plotly.js spells links it never follows)
    markup = re.sub(r"<script>.*?</script>", "", page, flags=re.S)
    assert not re.search(r'(src|href)="(https?:)?//', markup) and "<link" not in markup and "@import" not in markup
    assert "<script src" not in page


def test_the_plan_chart_marks_the_targets(tmp_path):
    """With targets, the front's points that miss them are drawn hollow, one marker each, and the best layout under
    them starred: as many of each as the page's JSON holds, and the targets in the chart's title; the front's range
    is shaded."""
    out = tmp_path / "plan.html"
    _run(
        [
            "plan",
            "--gpu",
            "h100",
            "--model",
            "llama-3-8b",
            "--gpus",
            "2",
            "--input-len",
            "512",
            "--output-len",
            "64",
            "--tpot-ms",
            "8",
            "--max-concurrency",
            "16",
            "--html",
            str(out),
        ]
    )
    page = out.read_text(encoding="utf-8")
    data = json.loads(_between(page, r'<script type="application/json" id="data">(.*?)</script>').replace("<\\/", "</"))
    missed = sum(not p["meets_targets"] for p in data["front"])
    assert 0 < missed < len(data["front"]) and len(data["best"]) == 1

    def markers(gid: str) -> int:
        start = page.index(f'<g id="{gid}">')
        return page[start : page.index("<g id=", start + 1)].count("<use")

    assert markers("misses:h100_sxm") == missed and markers("best:h100_sxm") == 1
    assert "TPOT &lt;= 8 ms" in page
    assert '<g id="band:h100_sxm">' in page  # the front's p10-p90 range shaded (tests/test_planner.py: its corners)


@pytest.mark.parametrize("gpu,batch", [("h100", "8"), ("a100", "256"), ("b200", "64")])
def test_a_model_step_page_puts_its_ops_on_the_roofline(tmp_path, gpu, batch):
    """A model step's page draws each op with FLOPs and bytes on the device's roofline, one marker each; and no op's
    predicted time beats the datasheet's roof (FLOPs / time <= min(peak, bandwidth x FLOPs per byte), bf16)."""
    out = tmp_path / "step.html"
    _run(["predict", "--gpu", gpu, "--model", "llama-3-8b", "--batch", batch, "--html", str(out)])
    page = out.read_text(encoding="utf-8")
    data = json.loads(_between(page, r'<script type="application/json" id="data">(.*?)</script>').replace("<\\/", "</"))
    hw, ops = data["hardware"], [o for o in data["decode"]["ops"] if o["flops"] > 0 and o["bytes"] > 0]
    start = page.index('<g id="roofline_ops">')
    assert page[start : page.index("<g id=", start + 1)].count("<use") == len(ops) and '<g id="roofline">' in page
    for o in ops:
        roof = min(hw["peak_flops_per_s"], hw["memory_bandwidth_bytes_per_s"] * o["flops"] / o["bytes"])
        assert o["flops"] / o["time_s"] <= roof * (1 + 1e-9), o["name"]


def test_html_does_not_go_with_a_sweep_or_a_bad_path(tmp_path):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["predict", "--gpu", "a100", "--sweep", "context=128:512:x2", "--html", str(out)])
    assert result.exit_code != 0 and "Error:" in result.output and "--html" in result.output and not out.exists()
    pdf = tmp_path / "r.pdf"
    result = CliRunner().invoke(main, ["predict", "--gpu", "a100", "--html", str(pdf)])
    assert result.exit_code != 0 and ".html" in result.output and not pdf.exists()
    missing = tmp_path / "no" / "such" / "r.html"
    result = CliRunner().invoke(main, ["predict", "--gpu", "a100", "--html", str(missing)])
    assert result.exit_code != 0 and "Error:" in result.output and not missing.exists()
    assert list(tmp_path.iterdir()) == []


def test_command_line_gives_the_options_as_given():
    import click

    from costmodel.cli.options import command_line

    @click.command()
    @click.option("--gpu", multiple=True)
    @click.option("--tp", type=int, default=1)
    @click.option("--fast/--slow", default=False)
    @click.option("--json", "as_json", is_flag=True)
    def cmd(gpu, tp, fast, as_json):
        click.echo(json.dumps(command_line(click.get_current_context(), skip=("as_json",))))

    out = CliRunner().invoke(cmd, ["--gpu", "a", "--gpu", "b", "--slow", "--json"]).output
    assert json.loads(out) == ["--gpu", "a", "--gpu", "b", "--slow"]
    assert json.loads(CliRunner().invoke(cmd, ["--tp", "4"]).output) == ["--tp", "4"]


def test_a_real_browser_opens_the_page_offline_and_draws_its_chart(tmp_path):
    """Chromium, headless, every host name unresolvable: plotly.js (inline) draws the interactive charts, the static
    ones are in the DOM, and the screenshot is not blank (skipped where no Chromium is installed: Debian's
    `chromium` package)."""
    import shutil
    import subprocess

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    out = tmp_path / "r.html"
    _run(["predict", "--gpu", "h100", "--model", "llama-3-8b", "--html", str(out)])
    offline = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run(
        [*offline, "--virtual-time-budget=5000", "--dump-dom", out.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "<svg" in dom and "llama_3_8b" in dom and "decode step" in dom
    assert dom.count('class="main-svg"') >= 3  # plotly drew the roofline and both phases' ops
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*offline, "--window-size=1000,900", "--virtual-time-budget=5000", f"--screenshot={shot}", out.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[0] == 900 and pixels.std() > 0.05  # a page with a chart on it, not a blank one
    # the roofline's line and points (plotly's first colour, #1f77b4) are on screen
    blue = (
        (abs(pixels[..., 0] - 0x1F / 255) < 0.05)
        & (abs(pixels[..., 1] - 0x77 / 255) < 0.05)
        & (abs(pixels[..., 2] - 0xB4 / 255) < 0.05)
    )
    assert blue.sum() > 1000


@pytest.mark.parametrize(
    "args,count",
    [
        (["sweep", "--gpu", "a100", "--x", "context", "--range", "128:1024:x2"], 3 * 4),
        (
            [
                "sweep",
                "--gpu",
                "h100",
                "--model",
                "llama-3-8b",
                "--x",
                "batch",
                "--range",
                "1:4:x2",
                "--input-len",
                "256",
                "--output-len",
                "16",
            ],
            3,
        ),
        (["roofline", "--gpu", "a100"], None),
    ],
)
def test_a_figure_as_a_page(tmp_path, args, count):
    out = tmp_path / "f.html"
    _run([*args, "--out", str(out)])
    page = out.read_text(encoding="utf-8")
    assert "<svg" in page and not re.search(r'(src|href)="(https?:)?//', page)
    data = json.loads(_between(page, r'<script type="application/json" id="data">(.*?)</script>').replace("<\\/", "</"))
    if count is not None:
        assert len(data) == count
    command = shlex.split(html.unescape(_between(page, r'<code id="command">(.*?)</code>')))
    assert command[0] == "costmodel" and "--out" in command
    again = tmp_path / "again.html"
    command[command.index("--out") + 1] = str(again)
    _run(command[1:])
    redrawn = again.read_text(encoding="utf-8")
    assert json.loads(_between(redrawn, r'id="data">(.*?)</script>').replace("<\\/", "</")) == data


@pytest.mark.parametrize(
    "model", [[], ["--model", "llama-3-8b", "--input-len", "256", "--output-len", "16"]], ids=["attention", "a model"]
)
def test_a_sweeps_html_is_its_figures_page(tmp_path, model):
    """``sweep --html FILE`` writes the page ``--out FILE.html`` writes (the same points), beside an image or alone;
    a sweep with neither writes nothing and says what to give."""
    x = ["--x", "batch", "--range", "1:4:x2"] if model else ["--x", "context", "--range", "128:512:x2"]
    args = ["sweep", "--gpu", "h100", *x, *model]
    _run([*args, "--out", str(tmp_path / "a.html")])
    _run([*args, "--out", str(tmp_path / "b.png"), "--html", str(tmp_path / "b.html")])
    points = [
        json.loads(
            _between((tmp_path / f).read_text(encoding="utf-8"), r'id="data">(.*?)</script>').replace("<\\/", "</")
        )
        for f in ("a.html", "b.html")
    ]
    assert points[0] == points[1] and (tmp_path / "b.png").read_bytes().startswith(b"\x89PNG")
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and "give --out FILE" in result.output and "Traceback" not in result.output


def test_html_on_standard_output_is_the_page_alone():
    page = _run(["predict", "--gpu", "a100", "--variant", "mqa", "--html", "-"])
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
