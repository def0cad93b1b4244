"""The web page in a real headless browser (Chromium driven by Selenium): fill the plan form, submit it, read the
ranked table, see a field's error, and take a screenshot that is not blank.

The server is the app under uvicorn in a thread of the test process, on a free port (``bench/ui_screenshot.py``
holds the machinery). Skipped, saying what is missing, without Chromium, chromedriver, Selenium or the ``ui``
extra.
"""

import time

import pytest

from benchscript import load_bench

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("matplotlib")

SHOT = load_bench("ui_screenshot")
REASON = SHOT.missing()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no headless browser here: {REASON}")

#: The plan answer's budget after the first (the first fills the library's caches) [s].
ANSWER_S = 2.0


@pytest.fixture(scope="module")
def site():
    with SHOT.running_server(warm=False) as base, SHOT.browser(1280, 1500) as driver:
        driver.get(base + "plan")                  # the default answer once: the caches filled
        yield base, driver


def _fill(driver, name: str, value: str) -> None:
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, f"f-{name}")
    box.clear()
    box.send_keys(value)


def _submit_and_wait(driver, *, until: str) -> float:
    """Submit the form and wait for the element ``until`` (a CSS selector) of the new page; returns the seconds."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element(By.TAG_NAME, "main")
    t0 = time.perf_counter()
    driver.find_element(By.ID, "submit").click()
    wait = WebDriverWait(driver, 30)

    def gone(_) -> bool:   # the old page's node left the document (Chrome may say so with a plain WebDriverException
        try:               # while the new page loads, where staleness_of expects StaleElementReferenceException)
            old.is_enabled()
            return False
        except WebDriverException:
            return True

    wait.until(gone)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, until)))
    return time.perf_counter() - t0


def test_plan_form_answers_with_a_table_and_a_chart(site, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    base, driver = site
    driver.get(base + "plan")
    _fill(driver, "model", "llama-3-8b")
    _fill(driver, "system", "dgx-h100")
    _fill(driver, "gpus", "8-64")
    _fill(driver, "tokens", "2T")
    _fill(driver, "price", "2.5")
    Select(driver.find_element(By.ID, "f-framework")).select_by_value("megatron")
    seconds = _submit_and_wait(driver, until="#plan-table tbody tr")
    assert seconds < ANSWER_S, f"the plan answer took {seconds:.2f} s"

    assert "tokens=2T" in driver.current_url and "price=2.5" in driver.current_url   # a link to share
    headers, rows = driver.execute_script(            # the cells in one call (one per cell is slow)
        "const t = document.getElementById('plan-table'); const text = r => [...r.cells].map(c => c.innerText);"
        "return [text(t.tHead.rows[0]), [...t.tBodies[0].rows].map(text)];")
    assert headers[:3] == ["#", "GPUs", "layout"] and "cost USD" in headers and "MFU" in headers
    assert len(rows) >= 5 and rows[0][0] == "1" and rows[0][1] in {"8", "16", "32", "64"}
    days = [float(r[headers.index("days")].replace(",", "")) for r in rows]
    assert days[0] == min(days)                                                  # ranked by time
    chart = driver.find_element(By.CSS_SELECTOR, "#chart svg")
    assert chart.size["width"] > 400 and chart.size["height"] > 150

    png = tmp_path / "plan.png"
    assert driver.save_screenshot(str(png))
    _assert_not_blank(png)


def test_a_bad_value_shows_its_error_beside_the_field(site):
    from selenium.webdriver.common.by import By

    base, driver = site
    driver.get(base + "plan?gpus=8")
    _fill(driver, "seq", "lots")
    _submit_and_wait(driver, until="#field-seq .err")
    error = driver.find_element(By.CSS_SELECTOR, "#field-seq .err")
    assert error.is_displayed() and "seq='lots'" in error.text and "ArgumentError" in error.text
    assert not driver.find_elements(By.ID, "plan-table")


def test_fit_and_serve_pages_draw_their_charts(site):
    from selenium.webdriver.common.by import By

    base, driver = site
    for page, ident in (("fit", "breakdown"), ("serve", "chart")):
        driver.get(base + page)
        assert driver.find_element(By.CSS_SELECTOR, f"#{ident} svg").size["height"] > 150
        assert driver.find_element(By.ID, "answer").is_displayed()


def _assert_not_blank(png) -> None:
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as image:
        colors = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 100, "the screenshot is (nearly) one colour"
