"""The page's speed as a person meets it, in headless Chromium (Debian's, through Selenium) against a server started
as a user starts it (``costmodel web``, its own process). Prints, as medians of ``--repeat`` runs where repeated:

- the first result of the README's served example (Qwen3 32B, TP 2 on H100, vLLM, 32 clients, 1,024 + 512 tokens):
  seconds from opening its URL (the browser's navigation start) to its numbers on the page (``window.shownAt``; the
  charts follow), on a server just started and again (the view kept);
- a plan of Llama 3.1 70B on 8 H100s (2,048 + 512 tokens) asked on a page already open: seconds until its progress
  shows, and until it is drawn, beside ``costmodel plan`` with the same options timed as a command (its own
  process; the median of three);
- two visitors: a step view's answer (over HTTP) while that plan runs in another tab.

    python benchmarks/web_page.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

SERVED = "view=served&model=Qwen/Qwen3-32B&tp=2&concurrency=32&input-len=1024&output-len=512"
PLAN = ["--model", "llama-3.1-70b", "--gpu", "h100", "--gpus", "8", "--input-len", "2048", "--output-len", "512"]
PLAN_QUERY = "view=plan&model=llama-3.1-70b&gpu=h100&gpus=8&input-len=2048&output-len=512"
STEP = "view=step&model=llama-3.1-8b&gpu=h100&batch=8&context=2048"


def _server() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "costmodel", "web", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(base + "/api/v1/form", timeout=1).read()
            return process, base
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the server did not start: " + process.stderr.read().decode()[-2000:])


def _browser():
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        options.add_argument(arg)
    return webdriver.Chrome(
        options=options, service=webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    )


def _until(driver, script: str, timeout: float = 600) -> float:
    """Seconds until ``script`` is true in the page, polled every 10 ms."""
    started = time.perf_counter()
    while not driver.execute_script(script):
        if time.perf_counter() - started > timeout:
            raise TimeoutError(script)
        time.sleep(0.01)
    return time.perf_counter() - started


SHOWN = "return !document.getElementById('result').hidden && document.querySelectorAll('#summary .card').length > 0"
DRAWN = "return !document.getElementById('result').hidden && document.querySelector('.js-plotly-plot') !== null"
PROGRESS = "return document.getElementById('progress').textContent.includes(' of ')"


def first_result(repeat: int) -> None:
    cold, kept = [], []
    for _ in range(repeat):
        process, base = _server()
        driver = _browser()
        try:
            for times, url in ((cold, f"{base}/?{SERVED}"), (kept, f"{base}/?{SERVED}&kept=")):
                driver.get(url.removesuffix("&kept="))
                _until(driver, SHOWN)
                times.append(driver.execute_script("return window.shownAt") / 1e3)  # from the URL's navigation
        finally:
            driver.quit()
            process.terminate()
            process.wait()
    print(
        f"README served example, URL opened to numbers shown: server just started {statistics.median(cold):.2f} s, "
        f"view kept {statistics.median(kept):.2f} s (medians of {repeat}; each: {', '.join(f'{t:.2f}' for t in cold)})"
    )


def plan_and_a_second_visitor() -> None:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "costmodel", "plan", *PLAN, "--json"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    command = statistics.median(times)
    process, base = _server()
    driver = _browser()
    answers = []

    def visitor():
        time.sleep(0.3)  # while the plan runs
        t = time.perf_counter()
        other_step = STEP.replace("batch=8", "batch=4")  # not a view the server keeps
        urllib.request.urlopen(f"{base}/api/v1/view?{other_step}", timeout=120).read()
        answers.append(time.perf_counter() - t)

    try:
        driver.get(f"{base}/?{STEP}")  # a page already open (plotly.js loaded once), as a person using it has
        _until(driver, DRAWN)
        other = threading.Thread(target=visitor)
        started = time.perf_counter()
        driver.get(f"{base}/?{PLAN_QUERY}")
        other.start()
        progress = _until(driver, PROGRESS + " || " + DRAWN[len("return ") :])
        drawn = time.perf_counter() - started
        drawn += _until(driver, DRAWN)
        other.join()
    finally:
        driver.quit()
        process.terminate()
        process.wait()
    print(
        f"plan of Llama 3.1 70B on 8 H100s: progress shown after {progress:.2f} s, drawn after {drawn:.1f} s; "
        f"`costmodel plan` as a command {command:.1f} s (page / command {drawn / command:.2f})"
    )
    print(f"a second visitor's step view (computed, not kept) while the plan runs: {answers[0]:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    first_result(args.repeat)
    plan_and_a_second_visitor()


if __name__ == "__main__":
    main()
