"""The pure core stays pure: no I/O library in gangway.events nor in the services' policies.

Two independent checks, so that a misconfigured linter cannot hide a violation: import-linter's
contracts in `.importlinter` (which also catch indirect imports), and a walk over the source's
import statements.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EVENTS = ROOT / "gangway" / "events"
IO_LIBRARIES = {"aiokafka", "faust", "sqlalchemy", "kubernetes_asyncio", "confluent_kafka", "yaml"}
POLICIES = sorted(ROOT.glob("gangway/services/*/policy.py"))


def package_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).parent.parts)


def imported_modules(source: str, package: str) -> list[str]:
    """Absolute names of every module some source imports, wherever the import statement is."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            names.append(".".join(part for part in (base, node.module) if part))
    return names


def allowed_in_events(module: str) -> bool:
    top = module.split(".")[0]
    return top in sys.stdlib_module_names or top == "msgspec" or module.startswith("gangway.events")


def test_import_linter_contracts_are_kept():
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--no-logo"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout


@pytest.mark.parametrize("path", sorted(EVENTS.glob("*.py")), ids=lambda p: p.name)
def test_events_import_only_the_stdlib_msgspec_and_themselves(path):
    imported = imported_modules(path.read_text(), package_of(path))
    assert [m for m in imported if not allowed_in_events(m)] == []


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.parent.name)
def test_policies_import_no_io_library(path):
    imported = imported_modules(path.read_text(), package_of(path))
    assert [m for m in imported if m.split(".")[0] in IO_LIBRARIES] == []


def test_the_import_walk_sees_relative_and_nested_imports():
    source = (
        "from . import codec\nfrom .catalogue import Envelope\nfrom .. import services\n"
        "def f():\n    import aiokafka\n"
    )
    found = imported_modules(source, "gangway.events")
    assert found == ["gangway.events", "gangway.events.catalogue", "gangway", "aiokafka"]
    assert [m for m in found if not allowed_in_events(m)] == ["gangway", "aiokafka"]
