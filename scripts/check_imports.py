"""Check the import contract between the project's packages, by reading every file's AST.

    python scripts/check_imports.py            # check this repository
    python scripts/check_imports.py --root DIR # check another tree (used by the tests)

The contract (see docs/architecture.md):
- a service package never imports another service package (they talk over gRPC and etcd);
- the libraries (danube_common, danube_sdk) never import a service package;
- danube_common never imports danube_sdk (the SDK builds on common, not the reverse);
- the launcher (danube_local) runs services as processes and never imports them.

A file belongs to the first ``danube_*`` directory on its path. Absolute imports,
``from x import y``, and ``importlib.import_module("x")`` / ``__import__("x")`` with a literal
name are checked; relative imports stay inside their own package and are fine.
Exit status: 0 when clean, 1 with one ``file:line: message`` per violation.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SERVICES = frozenset(
    {"danube_broker", "danube_lookup", "danube_load_manager", "danube_leader", "danube_wal_uploader"}
)
LIBS = frozenset({"danube_common", "danube_sdk"})
#: Directories (under the root) whose Python files are checked.
SOURCE_DIRS = ("services", "libs", "deploy", "spark")
_SKIP_PARTS = frozenset({"__pycache__", ".venv", "build", "dist", "node_modules"})


@dataclass(frozen=True, slots=True, order=True)
class Violation:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def owning_package(rel: Path) -> str | None:
    """The top-level package a file belongs to: the first ``danube_*`` directory on its path."""
    for part in rel.parts[:-1]:
        if part.startswith("danube_"):
            return part
    return None


def imported_modules(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """(absolute module name, line) for every import in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                yield node.module, node.lineno
        elif isinstance(node, ast.Call) and node.args:
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            arg = node.args[0]
            literal = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else ""
            if name in ("import_module", "__import__") and literal and not literal.startswith("."):
                yield literal, node.lineno


def rule_broken(importer: str, imported: str) -> str | None:
    """Why ``importer`` may not import ``imported``, or None if it may."""
    if importer == imported:
        return None
    if importer in SERVICES and imported in SERVICES:
        return (
            f"service {importer} imports service {imported}: services never import each other "
            "(talk over gRPC/etcd; share code through libs/common)"
        )
    if importer in LIBS and imported in SERVICES:
        return f"library {importer} imports service {imported}: libraries never depend on services"
    if importer == "danube_common" and imported == "danube_sdk":
        return "danube_common imports danube_sdk: common is below the SDK, never the other way round"
    if importer == "danube_local" and imported in SERVICES:
        return f"danube_local imports service {imported}: the launcher runs services as processes only"
    return None


def iter_sources(root: Path) -> Iterator[Path]:
    for d in SOURCE_DIRS:
        base = root / d
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            if not _SKIP_PARTS.intersection(path.relative_to(root).parts):
                yield path


def check_file(root: Path, path: Path) -> list[Violation]:
    rel = path.relative_to(root)
    importer = owning_package(rel)
    if importer is None:
        return []
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
    except SyntaxError as exc:
        return [Violation(str(rel), exc.lineno or 0, f"cannot parse: {exc.msg}")]
    out = []
    for module, line in imported_modules(tree):
        reason = rule_broken(importer, module.split(".")[0])
        if reason:
            out.append(Violation(str(rel), line, reason))
    return out


def check_tree(root: Path) -> tuple[list[Violation], int]:
    """All violations under ``root`` (sorted) and the number of files read."""
    violations: list[Violation] = []
    n = 0
    for path in iter_sources(root):
        n += 1
        violations.extend(check_file(root, path))
    return sorted(violations), n


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    violations, n = check_tree(args.root.resolve())
    for v in violations:
        print(v)
    if violations:
        print(f"import contract: {len(violations)} violation(s) in {n} files", file=sys.stderr)
        return 1
    print(f"import contract OK ({n} files checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
