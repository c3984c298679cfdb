"""How deep JSON may nest, measured without recursion.

Python's json module recurses once per level: a body of 50,000 ``[`` raises RecursionError
(or, near the limit, exhausts the stack of a thread with a small one). The API's parser and
the intake measure a document's depth on its text first, in a loop, and refuse a deep one
before json.loads sees it; ``value_depth`` does the same for a value already parsed.
"""

import itertools
import re
from typing import Any

# Levels of arrays and objects a document (an API body, an envelope's input) may nest.
# Deep enough for any form answer or state input a person reads; far below the ~1,000
# levels at which json.loads runs out of recursion.
MAX_DEPTH = 64

# An escape and the character it escapes (so \" and \\ never end or start a string), then
# what is left of the strings: removed, the brackets outside them are the structure. Both
# patterns run in linear time whatever the text, also on text that is not JSON.
_ESCAPE = re.compile(r"\\.", re.DOTALL)
_STRING = re.compile(r'"[^"]*"')
_BRACKET = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """Return how deep the arrays and objects of a JSON text nest (a scalar: 0).

    For a text that is not valid JSON the figure is a bound json.loads would reach at most.
    """
    structure = _STRING.sub("", _ESCAPE.sub("", text))
    brackets = _BRACKET.findall(structure)
    return max(itertools.accumulate((_STEP[bracket] for bracket in brackets), initial=0))


def value_depth(value: Any) -> int:
    """Return how deep the lists and dicts of a parsed JSON value nest, without recursing."""
    deepest = 0
    todo = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        todo.extend((child, depth + 1) for child in children)
    return deepest
