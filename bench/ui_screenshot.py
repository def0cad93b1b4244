"""Screenshot of the web page (``gpumodel ui``) in headless Chromium: the README's picture, and the browser test's
machinery (``tests/test_ui_browser.py`` loads this script).

Needs the ``ui`` extra, Selenium (the ``test`` extra) and Chromium with its driver (Debian: ``apt-get install
chromium chromium-driver``). The server runs in a thread of this process on a free port; the page is the Plan
page of its default form, answered once before the picture (the first answer fills the library's caches).

Usage::

    python bench/ui_screenshot.py                       # writes docs/ui-plan.png
    python bench/ui_screenshot.py --page fit --out fit.png --height 1300
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import socket
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The browser window [CSS pixels]: the README's picture shows the form, the answer, the table and the chart.
WIDTH, HEIGHT = 1280, 1720


def missing() -> str | None:
    """Why no browser can be driven here (None: Chromium, its driver and Selenium are all present)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium, or the test extra)"
    for program in ("chromium", "chromedriver"):
        if shutil.which(program) is None:
            return f"{program} is not installed (Debian: apt-get install chromium chromium-driver)"
    return None


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(warm: bool = True):
    """The app served by uvicorn in a background thread; yields its address (``http://127.0.0.1:PORT/``)."""
    import uvicorn

    from gpumodel.ui import create_app, url

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(warm=warm), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="ui-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield url("127.0.0.1", port)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def browser(width: int = WIDTH, height: int = HEIGHT):
    """A headless Chromium driven by Selenium, with the window ``width`` x ``height``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                f"--window-size={width},{height}", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def small_png(png: bytes, colors: int = 256) -> bytes:
    """The screenshot with its colours reduced to a palette (a third of the size), when Pillow is there."""
    try:
        from PIL import Image
    except ImportError:
        return png
    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=colors, method=Image.Quantize.FASTOCTREE)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", default="plan", choices=["plan", "fit", "serve"])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui-plan.png")
    parser.add_argument("--height", type=int, default=HEIGHT)
    args = parser.parse_args()
    reason = missing()
    if reason:
        raise SystemExit(f"cannot take the screenshot: {reason}")
    with running_server() as base, browser(height=args.height) as driver:
        driver.get(base + args.page)               # the first answer fills the caches
        driver.get(base + args.page)
        png = small_png(driver.get_screenshot_as_png())
    args.out.write_bytes(png)
    print(f"{args.out}: {len(png) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
