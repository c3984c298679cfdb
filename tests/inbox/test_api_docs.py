"""docs/API.md lists every supervisor operation, and its curl examples work as written."""

import json
import re
import shlex
from pathlib import Path

from django.urls import URLPattern
from rest_framework.test import APIClient

from accounts.roles import Role
from inbox import api_urls

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "API.md"


def _supervisor_section() -> str:
    text = API_DOC.read_text()
    return text[text.index("## Supervisors"):text.index("## Admins")]


def _curl_commands(section: str) -> list[list[str]]:
    block = section[section.index("```sh"):section.rindex("```")]
    joined = block.replace("\\\n", " ")
    return [shlex.split(line) for line in joined.splitlines() if line.startswith("curl ")]


def test_every_supervisor_route_is_documented_with_a_curl_example():
    section = _supervisor_section()
    routes = [str(p.pattern) for p in api_urls.urlpatterns
              if isinstance(p, URLPattern) and str(p.pattern).startswith("supervisor/")]
    assert len(routes) == 6
    urls = " ".join(arg for command in _curl_commands(section) for arg in command)
    for route in routes:
        documented = re.sub(r"<uuid:task_id>", "{id}", route.removeprefix("supervisor/"))
        assert documented in section, f"{route} is not in docs/API.md"
        example = re.sub(r"<uuid:task_id>", "$ID", route)
        assert example in urls, f"{route} has no curl example"


def test_the_supervisor_curl_examples_succeed_as_written(make_task, make_worker, api_token):
    boss = make_worker({"invoice-review": 5}, roles=(Role.SUPERVISOR,))
    ana = make_worker({"invoice-review": 3}, email="ana@example.com")
    ids = {"$ID": str(make_task().pk), "$ID2": str(make_task().pk),
           "$ID3": str(make_task().pk), "$TOKEN": api_token(boss, scope="supervise")}
    client = APIClient()
    commands = _curl_commands(_supervisor_section())
    assert len(commands) == 7
    for command in commands:
        words = [_fill(word, ids) for word in command[1:]]
        method, headers, data, url = "GET", {}, None, None
        while words:
            word = words.pop(0)
            if word == "-X":
                method = words.pop(0)
            elif word == "-H":
                name, _, value = words.pop(0).partition(": ")
                headers[name] = value
            elif word == "-d":
                data = words.pop(0)
            else:
                url = word.removeprefix("http://127.0.0.1:8000")
        assert headers["Authorization"] == f"Token {ids['$TOKEN']}"
        response = client.generic(method, url, data or "",
                                  content_type=headers.get("Content-Type", ""),
                                  HTTP_AUTHORIZATION=headers["Authorization"])
        assert response.status_code == 200, (command, response.content)
        if url.endswith("/bulk/"):
            assert set(response.json()["outcomes"].values()) == {"ok"}
        if data and "worker" in json.loads(data):
            assert response.json()["assignee"] == ana.email


def _fill(word: str, values: dict[str, str]) -> str:
    for name in sorted(values, key=len, reverse=True):
        word = word.replace(name, values[name])
    return word
