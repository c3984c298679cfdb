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


def watch(page, *, refusals_ok: bool = False) -> list[str]:
    """Collect the page's script errors, CSP violations and failed loads as they happen.

    refusals_ok: a 400 is no problem (a page showing a refused form's errors).
    """
    seen: list[str] = []

    def console(message) -> None:
        if message.type == "error" and not (refusals_ok and "status of 400" in message.text):
            seen.append(message.text)

    page.on("pageerror", lambda error: seen.append(f"script error: {error}"))
    page.on("console", console)
    return seen


def sign_in_home(page, email: str) -> None:
    """Sign in from / and wait for My queues, loaded."""
    sign_in(page, email, start="/")
    page.get_by_role("heading", name="My queues", level=1).wait_for()
    page.wait_for_load_state()
