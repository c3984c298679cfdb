import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from accounts.roles import Role
from inbox.services.intake import intake_message
from inbox.services.worker import task_take_next
from tests.browser.keyboard import LONG_EMAIL, PASSWORD, watch
from tests.factories import envelope, sqs_message

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("INBOX_TEST_ARTIFACTS", Path(__file__).resolve().parents[2]
                                / "test-artifacts"))


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """Debian's headless Chromium, driven by Playwright (never a downloaded browser)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


@pytest.fixture
def problems(page):
    """Collect script errors, CSP violations and failed loads of page; none may happen."""
    seen = watch(page)
    yield seen
    assert seen == []


@pytest.fixture
def screenshot():
    """Return a function saving a screenshot under test-artifacts/ (not committed)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def save(page, name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save


@pytest.fixture
def live_page(browser, asgi_server):
    """A browser page on the ASGI server, where pages hear changes as they happen."""
    context = browser.new_context(base_url=asgi_server)
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


@pytest.fixture
def day(make_task, make_worker, make_user, review_skill):
    """A day's worth of everything every page shows: tasks, holders, an intake error."""
    make_user(roles=(Role.ADMIN,), email="root@example.com", password=PASSWORD)
    supervisor = make_worker({"invoice-review": 3}, roles=(Role.WORKER, Role.SUPERVISOR),
                             email="sam@example.com", password=PASSWORD)
    reviewer = make_worker({"invoice-review": 4}, email=LONG_EMAIL, password=PASSWORD)
    for number in range(3):
        make_task(title=f"Review invoice INV-2026-000{number} from ACME Holdings Ltd",
                  priority=40 + number)
    held = task_take_next(worker=reviewer)
    supervised = task_take_next(worker=supervisor)
    assert intake_message(message=sqs_message(envelope(skill="no-such-skill"))) != "created"
    return {"held": held, "supervised": supervised}
