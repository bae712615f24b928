"""Draws docs/web.png: the local web page (``costmodel web``) in headless Chromium, driven by Selenium, at a view
given as the page's query. Needs the web and test extras and Debian's chromium and chromium-driver.

    python docs/web_screenshot.py "command=plan&gpu=h100_sxm&gpu=a100_80gb_sxm&model=llama-3.1-70b&gpus=4\
&input-len=4096&output-len=1024&tpot-ms=40" docs/web.png
"""

from __future__ import annotations

import shutil
import socket
import sys
import threading
import time


def main(query: str, out: str) -> None:
    import uvicorn
    from selenium import webdriver
    from selenium.webdriver.support.ui import WebDriverWait

    from costmodel.cli.commands import main as cli
    from costmodel.web.app import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app(cli, port=port), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1280,1100",
        "--hide-scrollbars",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(
        options=options, service=webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    )
    try:
        driver.get(f"http://127.0.0.1:{port}/?{query}")
        WebDriverWait(driver, 300).until(
            lambda d: d.execute_script(
                "const f = document.getElementById('report').contentDocument;"
                "return f && f.body && f.body.innerHTML.includes('<svg');"
            )
        )
        driver.save_screenshot(out)
    finally:
        driver.quit()
        server.should_exit = True


if __name__ == "__main__":
    main(*sys.argv[1:3])
