"""Generate Python code for the public gRPC API in `proto/`.

The code is generated at setup time (never committed) into `services/api/movepred/`. The proto
path is mapped to `services/api` so that the generated modules import each other as
`services.api.movepred.v1...`, which keeps them inside the runtime package.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = ROOT / "proto"
OUT = ROOT


def generate() -> list[Path]:
    protos = sorted(PROTO_ROOT.rglob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO_ROOT}")
    include = resources.files("grpc_tools") / "_proto"  # well-known types
    args = [
        "protoc",
        f"-Iservices/api={PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={OUT}",
        f"--pyi_out={OUT}",
        f"--grpc_python_out={OUT}",
    ]
    rels = [f"services/api/{p.relative_to(PROTO_ROOT).as_posix()}" for p in protos]
    # protoc resolves virtual paths, so pass files by their virtual name.
    code = protoc.main([*args, *rels])
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    out_dirs = {OUT / Path(r).parent for r in rels}
    for d in out_dirs:  # make the generated folders importable packages
        for parent in [d, *d.parents]:
            if parent == OUT / "services" / "api" or parent == OUT:
                break
            (parent / "__init__.py").touch()
    return [OUT / r for r in rels]


if __name__ == "__main__":
    made = generate()
    print(f"generated gRPC code for {len(made)} proto file(s)", file=sys.stderr)
