"""The page in a real browser (Debian's chromium through Selenium, tests/conftest.py's ``browser``): fill the form
and see a chart; hover a point and read the number the API gave; pin a result, add a second configuration and see
both series and their differences; reload the URL and get the same view; download the JSON and the CSV; open the
saved comparison with the network off."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("starlette", reason="the web extra (python -m pip install -e '.[web]')")


def _wait(driver, script: str, timeout: float = 120):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: d.execute_script(script))


def _shown(driver) -> dict:
    """Once the page shows a result: its title, its summary's numbers and each chart's trace names."""
    _wait(
        driver,
        "return !document.getElementById('result').hidden && document.querySelectorAll('.js-plotly-plot').length",
    )
    return driver.execute_script(
        "return {title: document.getElementById('title').textContent,"
        " summary: [...document.querySelectorAll('#summary .card b')].map(b => b.textContent),"
        " charts: Object.fromEntries([...document.querySelectorAll('.chart')].map(c => [c.dataset.chart, c.data.map(t => t.name)]))}"
    )


def _fill(driver, fields: dict) -> None:
    from selenium.webdriver.support.ui import Select

    for name, value in fields.items():
        element = driver.find_element("name", name)
        if element.tag_name == "select":
            Select(element).select_by_value(value)
        else:
            element.clear()
            element.send_keys(value)
    driver.find_element("id", "show").click()


def test_fill_the_form_hover_a_point_compare_and_reload(browser):
    from selenium.webdriver.common.action_chains import ActionChains

    driver, base = browser
    driver.get(base + "/")
    _fill(driver, {"view": "curve", "model": "llama-3-8b", "concurrency": "1,4,16", "output-len": "64"})
    first = _shown(driver)
    assert "load curve of 3 points" in first["title"] and first["charts"]["throughput"] == ["h100_sxm tp1 vllm"]
    # hover the middle point of the throughput curve with the mouse: its label reads the API's number
    api = json.loads(
        driver.execute_script(
            "const r = new XMLHttpRequest(); r.open('GET', '/api/v1/view?' + location.search.slice(1), false);"
            "r.send(); return r.responseText;"
        )
    )
    expected = api["report"][1]["output_tokens_per_s_per_gpu"]
    x, y = driver.execute_script(
        "const d = document.getElementById('chart-throughput'), l = d._fullLayout, t = d.data[0];"
        "return [l.margin.l + l.xaxis.l2p(t.x[1]) - l.width / 2, l.margin.t + l.yaxis.l2p(t.y[1]) - l.height / 2];"
    )
    chart = driver.find_element("id", "chart-throughput")
    ActionChains(driver).move_to_element(chart).move_by_offset(int(x), int(y)).perform()
    hover = _wait(driver, "const h = document.querySelector('#chart-throughput .hovertext'); return h && h.textContent")
    assert f"{expected:.4g}" in hover.replace(",", "") and "clients 4" in hover
    # pin it, change the device, show: both configurations' series, and their differences in a table
    driver.find_element("id", "pin").click()
    _fill(driver, {"gpu": "a100"})
    _wait(driver, "return document.getElementById('title').textContent.includes('A100')")
    both = _shown(driver)
    assert sorted(both["charts"]["throughput"]) == ["gpu=a100: a100_80gb_sxm tp1 vllm", "gpu=h100: h100_sxm tp1 vllm"]
    rows = driver.execute_script(
        "return [...document.querySelectorAll('#compare tbody tr')].map(r => r.cells[0].textContent)"
    )
    assert rows == ["gpu=h100", "gpu=a100", "gpu=a100 vs gpu=h100 (%)"]
    # the URL holds it all: opened afresh, the same view
    url = driver.current_url
    assert "pin=" in url and "gpu=a100" in url
    driver.get("about:blank")
    driver.get(url)
    _wait(driver, "return document.querySelectorAll('#chart-throughput .trace').length >= 2")
    assert _shown(driver) == both


def test_a_sortable_table_and_the_downloads(browser, tmp_path):
    driver, base = browser
    driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    driver.get(base + "/?view=curve&model=llama-3-8b&concurrency=8,1,2&output-len=32")
    _shown(driver)
    header = driver.find_element("css selector", "table[data-table=curve] th[data-key=tpot_ms]")
    assert header.text == "TPOT mean (ms)"
    header.click()
    header.click()  # descending
    loads = driver.execute_script(
        "return [...document.querySelectorAll('table[data-table=curve] tbody tr')].map(r => +r.cells[0].textContent)"
    )
    assert loads == [8, 2, 1]  # the most clients, the slowest token
    for link, name in (("download-json", "costmodel.json"), ("download-csv", "costmodel.csv")):
        driver.find_element("id", link).click()
        for _ in range(200):
            if (tmp_path / name).exists():
                break
            time.sleep(0.05)
    data = json.loads((tmp_path / "costmodel.json").read_text())
    assert [p["concurrency"] for p in data] == [8, 1, 2] and all("tpot_s" in p for p in data)
    lines = (tmp_path / "costmodel.csv").read_text().splitlines()
    assert lines[0].startswith("load (clients or req/s),TTFT mean (ms)") and len(lines) == 4
    assert float(lines[1].split(",")[3]) == pytest.approx(data[0]["tpot_s"] * 1e3, rel=1e-3)


def test_a_bad_field_is_shown_beside_it(browser):
    driver, base = browser
    driver.get(base + "/")
    _fill(driver, {"tp": "0"})
    message = _wait(driver, "return document.querySelector('label[data-field=tp] .field-error').textContent")
    assert "greater than or equal to 1" in message


def test_the_saved_comparison_opens_with_the_network_off(browser, tmp_path):
    """/export's file, opened from disk with the browser offline: the charts are drawn, both series there."""
    import urllib.request

    driver, base = browser
    query = "view=served&model=llama-3-8b&concurrency=4&output-len=32&pin=view%3Dserved%26model%3Dllama-3-8b%26concurrency%3D8%26output-len%3D32"
    with urllib.request.urlopen(f"{base}/export?{query}", timeout=120) as response:
        (tmp_path / "saved.html").write_bytes(response.read())
    driver.get("about:blank")
    driver.set_network_conditions(offline=True, latency=0, download_throughput=0, upload_throughput=0)
    driver.get((tmp_path / "saved.html").as_uri())
    shown = _shown(driver)
    assert sorted(shown["charts"]["timeline"])[0].startswith("concurrency=4: ")
    assert len(shown["charts"]["timeline"]) == 6  # three series of each configuration
    assert driver.execute_script("return document.getElementById('form').hidden")
