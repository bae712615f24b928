"""Draws the page's screenshots for docs/web.md: each view of the local web page (``costmodel web``) in headless
Chromium, driven by Selenium, from its URL; the result (its charts, tables and comparison) is what is captured.
Needs the web and test extras and Debian's chromium and chromium-driver.

    python docs/web_screenshot.py            # every view in VIEWS, to docs/web_<name>.png
"""

from __future__ import annotations

import shutil
import socket
import sys
import threading
import time

#: name -> the page's query: the README's served example, its load curve beside another TP size, a plan, a step.
VIEWS = {
    "served": "view=served&model=Qwen/Qwen3-32B&tp=2&concurrency=32&input-len=1024&output-len=512",
    "curve": "view=curve&model=Qwen/Qwen3-32B&tp=4&concurrency=1,4,16,64&output-len=512"
    "&pin=view%3Dcurve%26model%3DQwen%2FQwen3-32B%26tp%3D2%26concurrency%3D1%2C4%2C16%2C64%26output-len%3D512",
    "plan": "view=plan&model=llama-3.1-70b&gpu=h100&gpu=a100&gpus=4&input-len=2048&output-len=512&tpot-ms=50",
    "step": "view=step&model=llama-3.1-8b&gpu=h100&batch=16&context=4096",
    "attention": "view=attention&gpu=h100&batch=32&context=8192",
    "variants": "view=variants&model=llama-3.1-8b&gpu=h100&batch=32&context=8192",
    "derive": "view=derive&variant=gqa&mode=generate",
    "capacity": "view=capacity&model=llama-3.1-8b&gpu=h100&gpu=a100&input-len=2048&output-len=256&tpot-ms=30",
    "recommend": "view=recommend&model=llama-3.1-70b&gpu=h100&gpu=h200&input-len=2048&output-len=512"
    "&request-rate=10&ttft-ms=2000&tpot-ms=50",
}


def _server():
    import uvicorn

    from costmodel.cli.commands import main as cli
    from costmodel.web.app import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app(cli, port=port), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, port


def main(names: list[str]) -> None:
    from selenium import webdriver
    from selenium.webdriver.support.ui import WebDriverWait

    server, port = _server()
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,3000", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(
        options=options, service=webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    )
    try:
        for name in names or VIEWS:
            driver.get(f"http://127.0.0.1:{port}/?{VIEWS[name]}")
            WebDriverWait(driver, 600).until(
                lambda d: d.execute_script(
                    "return !document.getElementById('result').hidden && (document.querySelector('.js-plotly-plot')"
                    " || !document.querySelector('.chart'))"
                )
            )
            time.sleep(0.5)  # plotly's transitions
            driver.find_element("id", "result").screenshot(f"docs/web_{name}.png")
            print(f"wrote docs/web_{name}.png")
    finally:
        driver.quit()
        server.should_exit = True


if __name__ == "__main__":
    main(sys.argv[1:])
