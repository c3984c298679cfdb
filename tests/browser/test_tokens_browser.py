"""A user's API tokens page in a real browser: created with the keyboard, shown once."""

import pytest
from rest_framework.test import APIClient

from tests.browser import keyboard
from tests.browser.keyboard import PASSWORD, focused_id
from tests.browser.test_admin_browser import watch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_worker_creates_a_token_with_the_keyboard_and_sees_it_once(
    page, screenshot, make_worker, review_skill
):
    problems = watch(page)
    make_worker({"invoice-review": 3}, email="ana@example.com", password=PASSWORD)
    keyboard.sign_in(page, "ana@example.com", start="/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="API tokens").click()
    page.get_by_role("heading", name="API tokens", level=1).wait_for()
    page.get_by_text("You have no API tokens.").wait_for()

    page.get_by_label("Name").focus()
    page.keyboard.type("laptop")
    page.keyboard.press("Tab")
    assert focused_id(page) == "id_scope"
    assert page.locator("#id_scope option").all_inner_texts() == [
        "Read: look at what I may see, change nothing",
        "Work: read, and take and answer my tasks"]
    page.keyboard.press("Tab")
    assert focused_id(page) == "id_days"
    page.keyboard.press("Enter")

    page.get_by_role("heading", name="Copy the new token now").wait_for()
    assert focused_id(page) == "new-token"  # ready to copy
    secret = page.locator("#new-token").input_value()
    assert secret.startswith("inbox_")
    screenshot(page, "tokens-created")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    assert client.get("/api/inbox/tasks/mine/").status_code == 200

    page.goto("/team/tokens/")
    page.get_by_role("row", name="laptop").wait_for()
    assert secret not in page.content()
    page.get_by_role("button", name="Revoke the token laptop").focus()
    page.keyboard.press("Enter")
    page.get_by_role("status").get_by_text("Revoked the token laptop").wait_for()
    assert client.get("/api/inbox/tasks/mine/").status_code == 401
    assert problems == []
