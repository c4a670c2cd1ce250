"""The layers of docs/architecture.md hold: each package imports only what its layer may
(nothing below imports anything above), and nothing imports another package's private
names."""

from __future__ import annotations

import ast
from pathlib import Path

import acceld

ROOT = Path(acceld.__file__).parent
LEAVES = {"rpc", "reports", "diff", "states", "exception", "conf", "limits", "uuids",
          "jsoncodec", "threading_backend", "notify", "outbox", "signals", "validation"}
#: Modules of the conductor without I/O that the API may import (docs/architecture.md).
PURE = ("conductor.availability", "conductor.placement_plan")
#: What each unit may import besides itself and the shared leaves (docs/architecture.md).
ALLOWED = {
    "cmd": {"cli", "wiring", "db"},
    "wsgi": {"wiring"},
    "wiring": {"api", "conductor", "agent", "objects", "db", "clients", "policies",
               "collector"},
    # the explain routes apply Placement's and the binder's rules (the PURE modules)
    "api": {"policies", "objects", "db.api", "clients", *PURE},
    "cli": set(),
    "conductor": {"objects", "db.api", "clients"},
    "agent": {"hw", "clients", "virt"},
    "virt": {"hw"},
    "sim": {"hw", "virt"},
    "collector": set(),
    "objects": {"db"},
    "db": set(),
    "hw": set(),
    "clients": set(),
    "policies": set(),
    **{leaf: set() for leaf in LEAVES},
    "acceld": set(),
}


def _unit(module: str) -> str:
    parts = module.removesuffix(".__init__").split(".")
    return parts[1] if len(parts) > 1 else "acceld"


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def _allowed(source: str, target: str) -> bool:
    unit = _unit(target)
    if unit in (source, *LEAVES):
        return True
    rules = ALLOWED[source]
    return unit in rules or any(target == f"acceld.{rule}" or target.startswith(
        f"acceld.{rule}.") for rule in rules if "." in rule)


def test_every_import_follows_the_layers() -> None:
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        source = _unit(".".join(path.relative_to(ROOT.parent).with_suffix("").parts))
        assert source in ALLOWED, f"{path}: a package docs/architecture.md does not draw"
        for module, names in _imports(path):
            if not module.startswith("acceld."):
                continue
            targets = [module] if names == [] else [f"{module}.{n}" for n in names]
            for target in targets:
                # "from acceld.db import api" names the module acceld.db.api
                if not (_allowed(source, target) or _allowed(source, module)):
                    wrong.append(f"{path.relative_to(ROOT.parent)}: {target}")
    assert wrong == []


def test_no_private_name_is_imported_from_another_module() -> None:
    wrong = [f"{path.relative_to(ROOT.parent)}: {module}.{name}"
             for path in sorted(ROOT.rglob("*.py"))
             for module, names in _imports(path) for name in names
             if name.startswith("_")]
    assert wrong == []


def test_the_check_sees_a_crossing() -> None:
    assert not _allowed("hw", "acceld.agent.privileged")
    assert not _allowed("api", "acceld.db.generations")
    assert not _allowed("cli", "acceld.cmd.main")
    assert _allowed("api", "acceld.db.api")


def test_the_pure_modules_the_api_imports_import_only_leaves_and_each_other() -> None:
    """Their exception in the map holds only while they stay pure."""
    wrong = []
    for name in PURE:
        path = ROOT / (name.replace(".", "/") + ".py")
        for module, names in _imports(path):
            targets = [module] if names == [] else [f"{module}.{n}" for n in names]
            for target in targets:
                if not target.startswith("acceld."):
                    continue
                if _unit(target) in LEAVES or any(target == f"acceld.{p}" for p in PURE):
                    continue
                wrong.append(f"{name}: {target}")
    assert wrong == []
