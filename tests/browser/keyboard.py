"""Helpers for browser tests that work the way people do: with the keyboard."""

PASSWORD = "a-long-test-password-1"
# A phone's viewport, and a reviewer whose address is long enough to test wrapping.
PHONE = {"width": 360, "height": 740}
LONG_EMAIL = "a.very-long-reviewer-name@finance-department.example.com"


def sign_in(page, email: str, *, start: str = "/") -> None:
    """Open start, get sent to sign-in, and sign in with the keyboard alone."""
    page.goto(start)
    page.wait_for_function("document.activeElement && document.activeElement.name === 'login'")
    page.keyboard.type(email)
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")


def focused_id(page) -> str:
    """Return the id of the element that has the focus."""
    return page.evaluate("document.activeElement.id")
