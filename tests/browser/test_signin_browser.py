import pytest

from accounts.roles import Role
from accounts.services import skill_ensure, user_create, worker_skill_set

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_reviewer_signs_in_with_the_keyboard_and_sees_their_queues(page, screenshot):
    ana = user_create(email="ana@example.com", password="a-long-test-password-1",
                      roles=[Role.WORKER])
    worker_skill_set(worker=ana, skill=skill_ensure(slug="invoice-review", name="Invoice review"),
                     proficiency=4)
    page.goto("/")
    assert "/accounts/login/" in page.url
    assert page.evaluate("document.activeElement.name") == "login"
    page.keyboard.type("ana@example.com")
    page.keyboard.press("Tab")
    page.keyboard.type("a-long-test-password-1")
    screenshot(page, "sign-in")
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="My queues").wait_for()
    assert page.get_by_role("cell", name="Invoice review invoice-review").is_visible()
    screenshot(page, "my-queues")


def test_wrong_password_shows_an_error_and_stays_on_sign_in(page):
    user_create(email="ana@example.com", password="a-long-test-password-1", roles=[Role.WORKER])
    page.goto("/accounts/login/")
    page.get_by_label("Email").fill("ana@example.com")
    page.get_by_label("Password").fill("wrong-password-0")
    page.get_by_role("button", name="Sign In").click()
    page.get_by_text("not correct").wait_for()
    assert "/accounts/login/" in page.url
