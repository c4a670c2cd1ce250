"""pyproject.toml declares exactly what acceld imports: every dependency is imported
somewhere in acceld/, and every third-party module acceld imports is declared."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_modules() -> set[str]:
    """The top-level names of every module imported by a statement in acceld/."""
    names: set[str] = set()
    for path in (ROOT / "acceld").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"acceld", "__future__"}


# Modules of optional extras (``pip install 'acceld[X]'``): imported only where that
# feature is configured, so they need not be installed; module -> (extra, distribution).
OPTIONAL = {"libvirt": ("libvirt", "libvirt-python")}


def _names(requirements: list[str]) -> set[str]:
    return {_canonical(re.match(r"[A-Za-z0-9._-]+", req).group()) for req in requirements}


def test_each_optional_module_is_its_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for module, (extra, dist) in OPTIONAL.items():
        assert module in _imported_modules()
        assert _names(extras[extra]) == {_canonical(dist)}


def test_pyproject_declares_exactly_what_acceld_imports():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _names(project["dependencies"])
    providers = metadata.packages_distributions()
    imported = _imported_modules() - set(OPTIONAL)
    unknown = sorted(name for name in imported if name not in providers)
    assert not unknown, f"imported but installed by no distribution: {unknown}"
    used = {_canonical(dist) for name in imported for dist in providers[name]}
    assert sorted(used - declared) == [], "imported but not declared in pyproject.toml"
    assert sorted(declared - used) == [], "declared in pyproject.toml but never imported"
