"""A production install has no moto; ./dev installs the emulator's requirements too."""

import importlib.machinery
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOTO = "moto[server,stepfunctions,sqs]==5.2.5"


def _requirements(name: str) -> list[str]:
    lines = (ROOT / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_a_production_install_has_no_moto():
    """requirements.txt leaves moto out; requirements-emulator.txt pins it over it."""
    assert not any(line.lower().startswith("moto") for line in _requirements("requirements.txt"))
    assert _requirements("requirements-emulator.txt") == ["-r requirements.txt", MOTO]
    assert _requirements("requirements-dev.txt")[0] == "-r requirements-emulator.txt"


def test_dev_installs_and_stamps_every_requirements_file_it_reads():
    """./dev run installs requirements-emulator.txt, ./dev test requirements-dev.txt.

    Each stamp covers every file pip reads through -r, so a change to any reinstalls.
    """
    loader = importlib.machinery.SourceFileLoader("dev_script", str(ROOT / "dev"))
    spec = importlib.util.spec_from_loader("dev_script", loader)
    assert spec is not None
    dev = importlib.util.module_from_spec(spec)
    loader.exec_module(dev)

    assert dev.requirement_files("requirements-dev.txt") == [
        "requirements-dev.txt", "requirements-emulator.txt", "requirements.txt",
    ]
    assert dev.requirement_files("requirements-emulator.txt") == [
        "requirements-emulator.txt", "requirements.txt",
    ]
    source = (ROOT / "dev").read_text()
    assert 'ensure_venv("requirements-emulator.txt")' in source
    assert 'ensure_venv("requirements-dev.txt")' in source
