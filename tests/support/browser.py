"""Headless Chromium driven by Selenium, for the tests that click the approval page as a person would.

Chromium and its driver come from the system (Debian: ``chromium``, ``chromium-driver``); when they are missing
they are installed with apt-get (CI runs as root; ``.ci/run`` installs them up front too). Selenium is given both
paths, so it never tries to download a browser or a driver.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
PACKAGES = ["chromium", "chromium-driver"]


def _find() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def ensure_chromium() -> tuple[str, str]:
    """(browser, driver) paths; installs the Debian packages when they are missing. Never skips: a missing
    browser that cannot be installed is an error of the test machine."""
    found = _find()
    if found:
        return found
    apt = ["apt-get", "install", "-y", "-qq", *PACKAGES]
    if os.geteuid() != 0:
        apt = ["sudo", "-n", *apt]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    result = subprocess.run(apt, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:  # a fresh machine has no package lists yet
        update = ["apt-get", "update", "-qq"] if os.geteuid() == 0 else ["sudo", "-n", "apt-get", "update", "-qq"]
        subprocess.run(update, env=env, capture_output=True, text=True, check=False)
        result = subprocess.run(apt, env=env, capture_output=True, text=True, check=False)
    found = _find()
    if found is None:
        raise RuntimeError(
            f"Chromium is needed for the browser tests and could not be installed ({' '.join(apt)}):"
            f" {result.stderr[-2000:]}"
        )
    return found


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium session (Selenium WebDriver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = ensure_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1000,900",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(argument)
    session = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    session.set_page_load_timeout(60)
    try:
        yield session
    finally:
        session.quit()


def screenshot(session: Any, name: str) -> Path:
    """Save the page as test-artifacts/browser/<name>.png (git-ignored) and print where it is."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    assert session.save_screenshot(str(path)), f"no screenshot saved at {path}"
    print(f"screenshot: {path}")
    return path
