"""The dashboard in a real browser (a plugin tests/conftest.py loads): the `browser` fixture
(Debian's Chromium driven by Playwright), logging in through the login page (`_log_in`), and
screenshots of a page at a phone's and a desktop's width (`shoot`: under var/screenshots/ by
default, under docs/screenshots/ with `make screenshots`)."""

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / os.environ.get("TIDEMARK_SCREENSHOTS", "var/screenshots")
WIDTHS = {"phone": 390, "desktop": 1440}


@pytest.fixture
def browser(monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are
    # still plain synchronous code
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    assert shutil.which(CHROMIUM), "Debian's chromium is required (.ci/run installs it)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield browser
        browser.close()


def _log_in(page, base_url: str, user, *, next_path: str) -> None:
    user.set_password("pw-for-tests-only")
    user.save(update_fields=["password"])
    page.goto(f"{base_url}{next_path}")
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", user.get_username())
    page.fill("input[name=password]", "pw-for-tests-only")
    page.click("[type=submit]")
    page.wait_for_url(f"{base_url}{next_path}")


def shoot(page, name: str) -> None:
    """The page as it is now at a phone's and a desktop's width: SHOTS/NAME-390.png and
    NAME-1440.png (the desktop width stays for what the test does next)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS.values():
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
