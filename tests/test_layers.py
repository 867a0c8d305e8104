"""The house's import rules (.importlinter): layers top to bottom, siblings apart, the pure core pure
(no I/O library in gangway.events nor in the services' policies), and where Kafka, processes, SQL and
YAML are allowed (gangway/adapters/__init__.py states the rule).

The linter runs on the package laid out as installed, once as it is (every contract kept) and once
with one forbidden import added for each contract (every contract broken), so that a contract that
checks nothing fails here. The purity rules are also checked by a walk over the source's import
statements, so that a misconfigured linter cannot hide a violation.
"""

from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EVENTS = ROOT / "events"
IO_LIBRARIES = {"aiokafka", "faust", "sqlalchemy", "kubernetes_asyncio", "confluent_kafka", "yaml"}
POLICIES = sorted(ROOT.glob("services/*/policy.py"))


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


def package_dirs() -> dict[str, Path]:
    """pyproject's packages and where each one's folder is (package-dir maps a package and what is under it)."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = tool["package-dir"]
    dirs = {}
    for package in tool["packages"]:
        base = max((p for p in mapping if package == p or package.startswith(p + ".")), key=len)
        dirs[package] = ROOT / mapping[base] / Path(*package[len(base):].split(".")[1:])
    return dirs


def test_pyproject_lists_every_package_folder():
    listed = {path.resolve() for path in package_dirs().values()}
    found = {p.parent.resolve() for top in ("gangway", "events", "services") for p in (ROOT / top).rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert found - listed == set(), "add these packages to [tool.setuptools] packages in pyproject.toml"
    # (a folder listed without Python in it is a data-only package: the console's static files)
    assert {p for p in listed - found if any(p.glob("*.py"))} == set()
    assert all(p.is_dir() for p in listed)


def installed_layout(into: Path) -> Path:
    """The package laid out as an install lays it out (events/ and services/ inside gangway/)."""
    for package, folder in sorted(package_dirs().items()):
        target = into / Path(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for source in folder.glob("*.py"):
            shutil.copy(source, target / source.name)
    shutil.copy(ROOT / ".importlinter", into / ".importlinter")
    return into


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--no-logo"], cwd=tree,
        capture_output=True, text=True, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "COLUMNS": "1000"},
    )


def contract_names() -> dict[str, str]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    return {section.split(":")[-1]: parser[section]["name"] for section in parser.sections()
            if section.startswith("importlinter:contract:")}


def test_import_linter_contracts_are_kept(tmp_path):
    result = lint_imports(installed_layout(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(contract_names())} kept, 0 broken." in result.stdout
    assert len(contract_names()) == 10


#: An import each contract must refuse: (module, the line added to it).
VIOLATIONS = {
    "layers": ("gangway.events.fold", "import gangway.services.runtime.shell"),
    "events-pure": ("gangway.events.codec", "import gangway.stack"),
    "policies-pure": ("gangway.services.admission.policy", "import gangway.read.rules"),
    "services-apart": ("gangway.services.submission.service", "import gangway.services.binder.cluster"),
    "adapters-apart-from-contract": ("gangway.contract.kueue", "import gangway.adapters.kafka"),
    "kafka-in-adapters": ("gangway.stack", "import aiokafka"),
    "processes-in-adapters": ("gangway.sim", "import subprocess"),
    "sql-in-adapters-and-ledger": ("gangway.read.reports", "from sqlalchemy import select"),
    "yaml-where-files-are-parsed": ("gangway.services.runtime.shell", "import yaml"),
    "kubernetes-room": ("gangway.adapters.kafka", "import kubernetes_asyncio"),
}


def test_every_contract_refuses_an_import_it_forbids(tmp_path):
    assert set(VIOLATIONS) == set(contract_names())
    tree = installed_layout(tmp_path)
    for module, line in VIOLATIONS.values():
        path = tree / Path(*module.split("."))
        path = path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
        path.write_text(path.read_text() + f"\n{line}\n")
    result = lint_imports(tree)
    broken = {key for key, name in contract_names().items() if f"{name} BROKEN" in result.stdout}
    assert broken == set(VIOLATIONS), result.stdout


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


def test_a_command_that_needs_no_kubernetes_does_not_import_its_client():
    """Every `gangway` command and service process starts through cli.main: what it imports to catch
    its errors is paid by each (the Kubernetes client alone is 0.4 s — the suite starts hundreds)."""
    code = ("import sys\nfrom gangway.cli import main\n"
            f"main(['rules', '--config', {str(ROOT / 'gangway' / 'demo' / 'contract.yaml')!r}])\n"
            "print(sorted(m for m in ('kubernetes_asyncio', 'sqlalchemy', 'faust') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]", done.stdout[-500:]
