"""A headless Chromium for the dashboard tests: Playwright driving the system's chromium package.

`make test` installs Debian's chromium where it is missing; Playwright's own browser download
is never used. Where no browser can be had the tests are skipped, saying why, except in CI.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("CORRAL_TEST_ARTIFACTS", ROOT / "test-artifacts"))
CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    configured = os.environ.get("CORRAL_CHROMIUM")
    if configured:
        return configured
    return next((path for path in map(shutil.which, CANDIDATES) if path), None)


def unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{why}; CI must run the dashboard tests")
    pytest.skip(why)


def launch(playwright):
    executable = chromium_path()
    if executable is None:
        unavailable("no chromium on PATH (make test installs Debian's chromium when run as root)")
    # --no-sandbox: CI containers run as root, where Chromium's sandbox cannot start.
    return playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
