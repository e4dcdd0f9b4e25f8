"""Generate Python code for the public gRPC API in `proto/`.

The code is generated at setup time (never committed) into `services/api/movepred/`. protoc
runs with `proto/` itself as the include path, so the descriptors register the files under
their public names (`movepred/v1/search.proto`): a client that generates its own stubs from the
same file with `-I proto` loads the identical file into the same descriptor pool without a
conflict, in one process with ours. protoc's grpc plugin imports the messages by that public
path (`from movepred.v1 import search_pb2`); those imports are rewritten to the runtime package
(`services.api.movepred.v1`) so the generated modules stay inside it.
"""

from __future__ import annotations

import re
import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = ROOT / "proto"
OUT = ROOT / "services" / "api"
PACKAGE = "services.api"  # the Python package OUT is

# `from movepred.v1 import search_pb2 as x` / `import movepred.v1.search_pb2` at a line's start
_IMPORT = re.compile(r"^(\s*)(from|import)\s+movepred\.", re.MULTILINE)
# the module name the message classes get (their __module__, what pickle imports them by)
_MODULE = re.compile(r"(BuildTopDescriptorsAndMessages\(DESCRIPTOR, )'movepred\.")


def _top_packages() -> set[str]:
    """The proto root's top-level folders (`movepred`): the packages whose imports move."""
    return {p.relative_to(PROTO_ROOT).parts[0] for p in PROTO_ROOT.rglob("*.proto")}


def rewrite_imports(text: str) -> str:
    """`from movepred.v1 import search_pb2` -> `from services.api.movepred.v1 import ...`, and
    the classes' module name likewise (else pickling a message names a module that is not
    there)."""
    text = _IMPORT.sub(lambda m: f"{m.group(1)}{m.group(2)} {PACKAGE}.movepred.", text)
    return _MODULE.sub(lambda m: f"{m.group(1)}'{PACKAGE}.movepred.", text)


def generate() -> list[Path]:
    protos = sorted(PROTO_ROOT.rglob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO_ROOT}")
    if _top_packages() != {"movepred"}:
        raise SystemExit(f"expected only movepred/ under {PROTO_ROOT}, got {_top_packages()}")
    include = resources.files("grpc_tools") / "_proto"  # well-known types
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={OUT}",
        f"--pyi_out={OUT}",
        f"--grpc_python_out={OUT}",
    ]
    rels = [p.relative_to(PROTO_ROOT).as_posix() for p in protos]
    code = protoc.main([*args, *rels])
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    made = []
    for rel in rels:
        stem = OUT / Path(rel).with_suffix("")
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            path = stem.with_name(stem.name + suffix)
            if path.exists():
                text = path.read_text()
                fixed = rewrite_imports(text)
                if fixed != text:
                    path.write_text(fixed)
        made.append(OUT / rel)
    for d in {OUT / Path(r).parent for r in rels}:  # make the generated folders packages
        for parent in [d, *d.parents]:
            if parent == OUT:
                break
            (parent / "__init__.py").touch()
    return made


if __name__ == "__main__":
    made = generate()
    print(f"generated gRPC code for {len(made)} proto file(s)", file=sys.stderr)
