"""Helpers shared by the tests of the team pages (skills, intake errors, processes)."""

import re


def help_keys(html: str) -> set[str]:
    """The keys the page's help dialog lists (each <kbd> inside <dialog id="help-dialog">)."""
    dialog = re.search(r'<dialog id="help-dialog".*?</dialog>', html, re.S)
    assert dialog, "the page has no help dialog"
    return set(re.findall(r"<kbd>([^<]+)</kbd>", dialog.group(0)))
