"""Shared helpers: random small dimensions that satisfy a program's constraints, the CLI in-process, and the
CPU measurement the documentation shows, run once a session."""

from __future__ import annotations

import os
import random
import tempfile

import pytest

# Nothing in the tests reaches the Hugging Face Hub, and no developer's own cache changes a result: the Hub is off
# and the cache an empty folder (tests/test_hub.py builds the caches it reads).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp(prefix="costmodel-hf-cache-")

from costmodel.counts import symbols as S


def small_dims(rng: random.Random, variant: str, groups: int | None = None, low: int = 1) -> dict:
    """Random tiny dims as {symbol: int}, each >= ``low``; h is a multiple of the key/value heads.

    torch runs a contraction over a size-1 index as a broadcast multiply (and counts no FLOPs), so
    its oracle uses ``low=2``."""
    g = {"mha": None, "mqa": 1}.get(variant, groups or rng.choice([1, 2, 3]))
    h = (g or rng.randint(low, 3)) * rng.randint(1, 3)
    vals = {
        S.b: rng.randint(low, 3),
        S.n: rng.randint(low, 4),
        S.m: rng.randint(low, 4),
        S.d: rng.randint(low, 5),
        S.h: h,
        S.k: rng.randint(low, 4),
        S.v: rng.randint(low, 4),
    }
    vals[S.g] = h if g is None else g
    return vals


@pytest.fixture
def rng() -> random.Random:
    return random.Random(20191106)


@pytest.fixture
def run_cli():
    """Invoke the CLI in-process: its result (``exit_code``, ``output``: stdout and stderr together)."""
    from click.testing import CliRunner

    from costmodel.cli.commands import main

    def run(*args):
        return CliRunner().invoke(main, [str(a) for a in args])

    return run


@pytest.fixture(scope="session")
def h100():
    """The H100 SXM profile (fitted parameters), loaded once."""
    import costmodel

    return costmodel.load_profile("h100")


@pytest.fixture(scope="session")
def llama():
    """Llama 3.1 8B (d_model 4096, 32 layers, 8 key/value heads of 128), loaded once."""
    import costmodel

    return costmodel.load_model("llama-3.1-8b")


#: The CPU calibration and validation docs/validation.md shows, as the default suite runs them (``--quick``):
#: tests/test_docs.py checks that the pages' commands run, tests/test_validation.py reads what they wrote.
QUICK_CPU_RUN = (
    ("calibrate", "--device", "cpu", "--out", "my_cpu.yaml", "--quick"),
    (
        "validate",
        "--device",
        "cpu",
        "--quick",
        "--profile",
        "my_cpu.yaml",
        "--json",
        "report.json",
        "--plot",
        "report.png",
    ),
)


@pytest.fixture(scope="session")
def quick_cpu_run(tmp_path_factory):
    """:data:`QUICK_CPU_RUN`, run once (tens of seconds of this machine) in a folder of its own: (the folder,
    each command's result)."""
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from costmodel.cli.commands import main

    folder = tmp_path_factory.mktemp("quick_cpu_run")
    here = os.getcwd()
    os.chdir(folder)
    try:
        results = [CliRunner().invoke(main, list(args)) for args in QUICK_CPU_RUN]
    finally:
        os.chdir(here)
    return folder, results


@pytest.fixture(scope="module")
def served():
    """The app served by Uvicorn on a free port of this machine: its base URL."""
    import socket
    import threading
    import time

    uvicorn = pytest.importorskip("uvicorn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from costmodel.cli.commands import main
    from costmodel.web.app import app

    server = uvicorn.Server(uvicorn.Config(app(main, port=port), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def browser(tmp_path, served):
    """A real Chromium (Debian's ``chromium``, headless, every host but this one unresolvable) driven through its
    ``chromedriver`` by Selenium, against the served app: ``(driver, base URL)``. Skipped where the browser, its
    driver or Selenium is not installed; nothing is downloaded."""
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.skip("no chromium and chromedriver on this machine (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="Selenium (the test extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1200,1000",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=chromedriver))
    driver.set_page_load_timeout(120)
    try:
        yield driver, served
    finally:
        driver.quit()
