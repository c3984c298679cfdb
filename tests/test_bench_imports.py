"""Every name a bench imports from the project exists: a rename in the product fails here,
not in the next bench/run_all (benches import inside their functions, after setup, so
importing a bench's module would not notice; bench/orm_compile.py broke that way once)."""

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
PROJECT = ("accounts", "config", "inbox", "processes")


def _project_imports() -> list[tuple[str, int, str, str]]:
    found = []
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                    and node.module.split(".")[0] in PROJECT):
                found += [(path.name, node.lineno, node.module, alias.name)
                          for alias in node.names]
    return found


IMPORTS = _project_imports()


def test_the_benches_import_from_the_project():
    assert len({bench for bench, *_ in IMPORTS}) >= 10, IMPORTS  # the walk found them


@pytest.mark.parametrize(("bench", "line", "module", "name"), IMPORTS,
                         ids=[f"{b}:{n}:{m}.{a}" for b, n, m, a in IMPORTS])
def test_each_name_a_bench_imports_exists(bench, line, module, name):
    imported = importlib.import_module(module)
    if not hasattr(imported, name):  # a submodule: from inbox.services import worker
        importlib.import_module(f"{module}.{name}")
