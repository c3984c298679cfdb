"""Every page in a real browser, as each role sees it: on a phone, its focus ring, its chips."""

import pytest

from tests.browser import keyboard
from tests.browser.keyboard import LONG_EMAIL, PASSWORD, PHONE

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]



watch = keyboard.watch


sign_in = keyboard.sign_in_home


def sideways(page) -> int:
    """Return how far the page scrolls sideways (0: it fits its viewport)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def widest(page) -> list[str]:
    """Name the elements sticking out of the viewport: what to fix when a page does not fit."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('body *'))
        .filter(el => el.getBoundingClientRect().right > window.innerWidth + 0.5)
        .filter(el => !el.closest('dialog:not([open])'))
        .slice(0, 8)
        .map(el => el.tagName.toLowerCase() + (el.className ? '.' + el.className : '')
             + ' ' + Math.round(el.getBoundingClientRect().right))""")


def test_every_page_fits_a_360px_phone_without_scrolling_sideways(browser, live_server, day,
                                                                  screenshot):
    pages = {
        LONG_EMAIL: ["/", f"/tasks/{day['held'].pk}/", "/team/tokens/"],
        "sam@example.com": ["/supervisor/", f"/tasks/{day['held'].pk}/"],
        "root@example.com": ["/team/skills/", "/team/tokens/", "/team/audit/", "/team/intake/",
                             "/team/processes/"],
    }
    too_wide = {}
    for email, paths in pages.items():
        context = browser.new_context(base_url=live_server.url, viewport=PHONE)
        try:
            page = context.new_page()
            page.set_default_timeout(10_000)
            problems = watch(page)
            sign_in(page, email)
            for path in paths:
                page.goto(path)
                page.wait_for_load_state()
                page.locator("h1").first.wait_for()
                if sideways(page) > 0:
                    too_wide[f"{email} {path}"] = widest(page)
                name = ("task" if path.startswith("/tasks/")
                        else path.strip("/").replace("/", "-") or "home")
                screenshot(page, f"phone-{email.split('.')[0].split('@')[0]}-{name}")
                if path == "/":  # a table scrolling in its own box is still a table
                    queues = page.get_by_role("table").filter(has_text="Oldest waiting")
                    header = queues.get_by_role("columnheader", name="Waiting", exact=True)
                    assert header.count() == 1
                    assert queues.get_by_role("row").count() == 2
            assert problems == []
        finally:
            context.close()
    assert not too_wide, "\n".join(f"{where}: {els}" for where, els in too_wide.items())


def contrast(first: str, second: str) -> float:
    """Return the WCAG contrast ratio of two colours given as CSS rgb()/rgba() strings."""

    def luminance(color: str) -> float:
        red, green, blue = (int(float(part)) for part in
                            color[color.index("(") + 1:color.index(")")].split(",")[:3])

        def channel(value: int) -> float:
            value /= 255
            return value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4

        return 0.2126 * channel(red) + 0.7152 * channel(green) + 0.0722 * channel(blue)

    light, dark = sorted((luminance(first), luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_contrast_is_computed_as_wcag_does():
    assert round(contrast("rgb(143, 176, 255)", "rgb(255, 255, 255)"), 1) == 2.1  # the old ring
    assert round(contrast("rgb(143, 176, 255)", "rgb(247, 248, 250)"), 1) == 2.0  # on the page
    assert round(contrast("rgb(0, 0, 0)", "rgb(255, 255, 255)"), 1) == 21.0


def test_the_focus_ring_has_3_to_1_contrast_on_every_background_it_meets(page, day):
    """WCAG 2.2 (1.4.11, 2.4.13): the ring against the header, the page, a card and a list.

    The ring is drawn 2 px outside the focused control, so it meets what is around it (a
    button's own fill is inside it).
    """
    sign_in(page, LONG_EMAIL)
    page.goto(f"/tasks/{day['held'].pk}/")
    page.locator("#answer-form").wait_for()
    page.wait_for_load_state()
    page.keyboard.press("Tab")  # the first choice, a radio: it shows the ring
    ring = page.evaluate("""() => { const style = getComputedStyle(document.activeElement);
        return [style.outlineStyle, style.outlineColor, style.outlineWidth]; }""")
    assert ring[0] != "none" and float(ring[2].rstrip("px")) >= 2
    backgrounds = page.evaluate("""() => Object.fromEntries(
        ['header.top', 'body', '.card', 'table.history', '.field .option',
         '.field .option:has(input:checked)', 'a.button.danger']
        .map(sel => [sel, document.querySelector(sel)])
        .filter(([, el]) => el)
        .map(([sel, el]) => [sel, getComputedStyle(el).backgroundColor]))""")
    assert len(backgrounds) >= 6
    ratios = {where: round(contrast(ring[1], color), 2) for where, color in backgrounds.items()
              if not color.startswith("rgba(0, 0, 0, 0)")}
    assert min(ratios.values()) >= 3, ratios
    # The title's own ring (a dotted one, when focus moves to it) is the same colour.
    title_ring = page.evaluate("""() => { const h = document.getElementById('task-title');
        h.focus({focusVisible: true}); return getComputedStyle(h).outlineColor; }""")
    assert contrast(title_ring, "rgb(255, 255, 255)") >= 3


def test_shortcut_chips_show_only_where_the_script_makes_their_keys_work(browser, live_server,
                                                                         day):
    def chips(page) -> list[str]:
        return page.evaluate("""() => Array.from(document.querySelectorAll('main kbd, header kbd'))
            .filter(el => el.getClientRects().length > 0)
            .map(el => el.textContent)""")

    seen = {}
    for scripted in (False, True):
        context = browser.new_context(base_url=live_server.url, java_script_enabled=scripted)
        try:
            page = context.new_page()
            page.set_default_timeout(10_000)
            if scripted:
                sign_in(page, LONG_EMAIL)
            else:  # no script: no focus on the e-mail field to type into; fill it
                page.goto("/")
                page.fill("input[name=login]", LONG_EMAIL)
                page.fill("input[name=password]", PASSWORD)
                page.press("input[name=password]", "Enter")
                page.get_by_role("heading", name="My queues", level=1).wait_for()
            home = chips(page)
            page.goto(f"/tasks/{day['held'].pk}/")
            page.locator("#answer-form").wait_for()
            page.wait_for_load_state()
            seen[scripted] = (home, chips(page))
        finally:
            context.close()
    assert seen[False] == ([], [])
    home, task = seen[True]
    assert "?" in home and "n" in home
    assert {"1", "2", "r", "u"} <= set(task)


def test_an_idle_clock_is_a_small_chip_beside_the_running_ones(page, day):
    """A held task's offer clock is not running: it does not take a third of the row."""
    sign_in(page, LONG_EMAIL)
    page.goto(f"/tasks/{day['held'].pk}/")
    page.locator("#task-clocks").wait_for()
    widths = page.evaluate("""() => Object.fromEntries(
        Array.from(document.querySelectorAll('#task-clocks [data-clock]'))
            .map(el => [el.dataset.clock, el.getBoundingClientRect().width]))""")
    assert page.locator('[data-clock="offer"].idle').get_by_text("not running").count() == 1
    assert widths["offer"] < widths["work"] / 2, widths
    assert abs(widths["work"] - widths["overall"]) < 2, widths
