"""docs/SECURITY.md names the test behind each control: every test and file it names exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "SECURITY.md").read_text(encoding="utf-8")


def _test_names() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names.update(re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
    return names


def test_every_test_file_the_security_doc_names_exists():
    paths = set(re.findall(r"`(tests/[\w/]+(?:\.py)?)`", DOC))
    assert paths
    missing = sorted(path for path in paths if not (ROOT / path).exists())
    assert not missing


def test_every_test_the_security_doc_names_exists():
    """A name ending in "..." stands for the test it starts."""
    known = _test_names()
    named = re.findall(r"`(test_\w+)(\.\.\.)?`", DOC)
    assert len(named) > 40
    missing = sorted(
        name for name, cut in named
        if (not any(test.startswith(name) for test in known) if cut else name not in known)
    )
    assert not missing
