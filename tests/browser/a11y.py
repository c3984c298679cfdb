"""axe-core in the real page: every page state a browser test reaches is checked with it.

The rules are axe-core's own (WCAG 2.0-2.2 A and AA, and its best practices), from the
axe-playwright-python wheel's bundled axe.min.js: nothing downloaded at test time.
"""

from functools import cache
from pathlib import Path

# WCAG A/AA of every version axe knows, and its best practices (landmarks, headings).
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]


@cache
def _script() -> str:
    import axe_playwright_python

    return (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text("utf-8")


def violations(page) -> list[str]:
    """Return one line per axe-core violation on the page as it is now (none: [])."""
    # Settled first: a resize or a swap the test just made is handled by the page's script
    # (say, a table that now scrolls becoming focusable) before the next frame.
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => "
                  "requestAnimationFrame(done)))")
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        # Added as a script element's text would meet the page's CSP; evaluate does not.
        page.evaluate(_script())
    result = page.evaluate(
        "tags => axe.run(document, {runOnly: {type: 'tag', values: tags}})", TAGS)
    return [
        f"{rule['id']} ({rule['impact']}): {rule['help']} at "
        + "; ".join(" ".join(node["target"]) for node in rule["nodes"][:4])
        for rule in result["violations"]
    ]


def assert_accessible(page, state: str) -> None:
    """Fail with every violation axe-core finds on the page, naming the page state."""
    found = violations(page)
    assert not found, f"axe-core on {state} ({page.url}):\n" + "\n".join(found)
