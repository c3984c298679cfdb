"""Production code never imports moto or the local emulator.

The emulator (processes/emulator/) is development-only and needs moto, which
requirements-emulator.txt installs and requirements.txt leaves out. Only that package may
import moto, and only the emulator command may import the package, when it runs.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ROOMS = ("config", "inbox", "accounts", "processes")
EMULATOR_PACKAGE = ROOT / "processes" / "emulator"
EMULATOR_COMMAND = ROOT / "processes" / "management" / "commands" / "emulator.py"
# werkzeug, which the emulator's server uses, comes with moto: production has none either.
DEV_ONLY_MODULES = ("moto", "werkzeug", "processes.emulator")


def _imported(node: ast.AST, *, package: list[str]) -> list[str]:
    """Return the modules node imports: import, from-import (relative too), import_module.

    package is the dotted name, as parts, of the package holding the module.
    """
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parent = package[: len(package) - node.level + 1]
            base = ".".join([*parent, *([base] if base else [])])
        # "from processes import emulator" imports processes.emulator.
        return [base, *(f"{base}.{alias.name}" for alias in node.names)]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        function = node.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(
            function, "id", ""
        )
        if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
            return [node.args[0].value]
    return []


def _imports(path: Path, *, root: Path = ROOT, eager_only: bool = False) -> list[tuple[int, str]]:
    """Return (line, module) for every import in path under root, those inside functions too.

    With eager_only, skip function bodies: return what importing the module runs.
    """
    package = list(path.parent.relative_to(root).parts)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        line = getattr(node, "lineno", 0)
        found += [(line, name) for name in _imported(node, package=package)]
        for child in ast.iter_child_nodes(node):
            lazy = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if not (eager_only and lazy):
                todo.append(child)
    return sorted(found)


def _dev_only(module: str) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in DEV_ONLY_MODULES)


def _production_files() -> list[Path]:
    files = []
    for room in PRODUCTION_ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            if EMULATOR_PACKAGE in path.parents or path == EMULATOR_COMMAND:
                continue
            files.append(path)
    return files


def test_production_code_never_imports_moto_or_the_emulator():
    """No module of config/, inbox/, accounts/ or processes/ imports them, even lazily."""
    files = _production_files()
    assert ROOT / "processes" / "aws.py" in files
    assert ROOT / "processes" / "management" / "commands" / "process_deploy.py" in files
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for path in files
        for line, module in _imports(path)
        if _dev_only(module)
    ]
    assert offenders == []


def test_emulator_command_imports_the_emulator_only_when_it_runs():
    """Loading the command (manage.py help lists it) needs no moto; running it does."""
    eager = [module for _line, module in _imports(EMULATOR_COMMAND, eager_only=True)]
    lazy = [module for _line, module in _imports(EMULATOR_COMMAND)]
    assert [module for module in eager if _dev_only(module)] == []
    assert "processes.emulator.server" in lazy


def test_only_the_emulator_package_imports_moto():
    """Within the emulator package moto is expected; the check above sees it elsewhere."""
    package = [module for path in sorted(EMULATOR_PACKAGE.rglob("*.py"))
               for _line, module in _imports(path)]
    assert any(module.startswith("moto.") for module in package)
    assert not any(
        module.startswith("moto") for _line, module in _imports(EMULATOR_PACKAGE / "__init__.py")
    )


def test_the_import_scan_sees_imports_inside_functions_and_relative_ones(tmp_path):
    """The scan itself: a lazy import, a relative one and import_module are all found."""
    room = tmp_path / "processes"
    room.mkdir()
    module = room / "late.py"
    module.write_text(
        "import importlib\n"
        "def f():\n"
        "    from moto.core import config\n"
        "    from . import emulator\n"
        "    return importlib.import_module('moto.server')\n"
    )
    found = {name for _line, name in _imports(module, root=tmp_path) if _dev_only(name)}
    eager = {
        name for _line, name in _imports(module, root=tmp_path, eager_only=True)
        if _dev_only(name)
    }
    assert found == {"moto.core", "moto.core.config", "processes.emulator", "moto.server"}
    assert eager == set()
