"""The project modules a module imports, directly or not, found by reading their sources.

Why: a cache of derived data (the ingest's per-source intermediates) is valid only as long as
the code that made it is unchanged, and a hand-kept list of that code's modules goes stale the
day someone adds an import (it missed `services/games/go/fast.py`). Reading the sources
(`ast`) rather than looking at `sys.modules` gives the same answer in every process, whatever
it imported before, and counts imports made inside functions (run only on some inputs) too.

A project module is one whose file is under `root` (`a/b.py` or `a/b/__init__.py` for
`a.b`); imports of anything else (the standard library, installed packages) are not followed.
Importing `a.b.c` runs `a/__init__.py` and `a/b/__init__.py` as well, so those count. Imports
made by name at run time (`importlib.import_module(name)`) are seen where the name is written
out in the source: every string literal that names a project module counts as an import of it
(the game registry imports its built-in games that way). A literal that merely mentions a
module (a subprocess's `-m` argument, say) is counted too: the closure may be larger than
needed, never smaller, which for a cache key errs on the safe side.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")  # 'a.b', 'a.b.c': a module name


def module_file(name: str, root: Path) -> Path | None:
    """The source file of the project module `name` under `root`, or None if it is not one."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _with_packages(name: str) -> list[str]:
    """'a.b.c' -> ['a', 'a.b', 'a.b.c']: importing a module runs its packages first."""
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


def _imported_names(path: Path, name: str) -> set[str]:
    """Every module name an import statement of the file could load (a `from a import b`
    gives 'a' and 'a.b': b may be a submodule)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, `level - 1` packages up
                parts = package.split(".") if package else []
                base_parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if base:
                names.add(base)
            names.update(f"{base}.{alias.name}" if base else alias.name for alias in node.names
                         if alias.name != "*")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and _DOTTED.fullmatch(node.value)):
            names.add(node.value)  # a module imported by name; followed only if it is ours
    return names


def import_closure(module: str, root: Path) -> dict[str, Path]:
    """Module name -> source file of `module` and every project module it imports, directly
    or through others, sorted by name."""
    root = Path(root)
    found: dict[str, Path] = {}
    todo = _with_packages(module)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        path = module_file(name, root)
        if path is None:
            continue
        found[name] = path
        for imported in _imported_names(path, name):
            todo.extend(n for n in _with_packages(imported) if n not in found)
    return dict(sorted(found.items()))


def closure_digest(module: str, root: Path) -> str:
    """SHA-256 over the names and sources of `import_closure(module, root)`: it changes when
    any of that code changes, or a module joins or leaves the closure."""
    h = hashlib.sha256()
    for name, path in import_closure(module, root).items():
        source = path.read_bytes()
        h.update(f"{name}\0{len(source)}\0".encode())
        h.update(source)
    return h.hexdigest()
