"""The import structure docs/architecture.md describes, checked on the code: imports run one way
(down the floors below), no task package imports another, and no module imports another's
private (``_name``) names. A change that breaks one of these is a design change: say so in
docs/architecture.md and change FLOORS here together."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "kformer"
TASK_PACKAGES = ("classify", "translate", "arithmetic")
# Floor of each part of kformer: a part imports only from parts on its own floor or below (its
# own modules excepted). The same table, in words, is docs/architecture.md's.
FLOORS = {
    "errors": 0, "artifacts": 0, "faults": 0, "threads": 0, "extras": 0, "auto": 0, "launcher": 0, "__version__": 0,
    "environment": 1, "config": 1, "layers": 1, "text": 1,
    "data": 2, "metrics": 2, "viz": 2, "precision": 2, "training": 2,
    "models": 3, "folders": 3, "parallel": 3,
    "tasks": 4,
    "tasks.task": 5,
    "export": 6,
    "cli": 7, "server": 7,
    "kformer": 8, "__main__": 8, "setup": 1,
}


def part(module: str) -> str:
    """The part of kformer a module belongs to: ``tasks.task`` for a task package, else its top name."""
    names = module.split(".")[1:]
    if not names:
        return "kformer"
    if names[0] == "tasks" and len(names) > 1 and names[1] in TASK_PACKAGES:
        return "tasks.task"
    return names[0]


def imports():
    """``(importing module, imported module, names)`` for every import of kformer in src/."""
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "kformer":
                if node.module == "kformer":
                    for alias in node.names:
                        yield module, f"kformer.{alias.name}", []
                else:
                    yield module, node.module, [alias.name for alias in node.names]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "kformer":
                        yield module, alias.name, []


def task_of(module: str) -> str | None:
    names = module.split(".")
    return names[2] if len(names) > 2 and names[1] == "tasks" and names[2] in TASK_PACKAGES else None


def test_every_part_has_a_floor():
    assert {part(module) for module, _, _ in imports()} <= set(FLOORS)


def test_imports_run_down_the_floors():
    upward = sorted(f"{module} imports {target}" for module, target, _ in imports()
                    if part(module) != part(target) and FLOORS[part(target)] > FLOORS[part(module)])
    assert upward == []


def test_no_task_package_imports_another():
    crossing = sorted(f"{module} imports {target}" for module, target, _ in imports()
                      if task_of(module) and task_of(target) and task_of(module) != task_of(target))
    assert crossing == []


def test_no_module_imports_private_names_of_another():
    private = sorted(f"{module} imports {name} from {target}" for module, target, names in imports()
                     for name in names if name.startswith("_") and not name.startswith("__") and target != module)
    assert private == []


def test_the_floor_check_sees_an_upward_import():
    assert FLOORS[part("kformer.cli.classify")] > FLOORS[part("kformer.tasks.classify.model")] > FLOORS[
        part("kformer.models.seq2seq")]
