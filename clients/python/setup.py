"""Build hooks of movepred-client: the gRPC stubs are generated from proto/ at build time.

Why at build time: the stubs then always match the proto of the checkout the wheel is built
from, and nothing generated is committed twice (the platform generates its own copy at setup).
The proto is compiled with ``-I proto``, so the descriptor's file name is
``movepred/v1/search.proto`` (what server reflection and other clients see); the stubs go to
``movepred_client/v1/`` and their ``from movepred.v1 import ...`` lines are rewritten to the
package path. An sdist carries a copy of proto/ so a wheel can be built from it alone.

The stubs check at import that grpcio and protobuf are at least the versions that generated
them, so the dependency floors below are checked against what was generated: a build with a
newer grpcio-tools than the floors fails here instead of making a wheel that fails at import.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
PACKAGE = "movepred_client"
# the checkout's proto/ when built from clients/python, else the copy an sdist carries
PROTO_ROOTS = (HERE.parent.parent / "proto", HERE / "proto")
PROTO_PACKAGE = "movepred"  # proto/movepred/... -> movepred_client/...

GRPCIO_FLOOR = "1.81.1"   # GRPC_GENERATED_VERSION of grpcio-tools 1.81.1
PROTOBUF_FLOOR = "6.33.5"  # the protobuf gencode version of grpcio-tools 1.81.1
INSTALL_REQUIRES = [f"grpcio>={GRPCIO_FLOOR},<2", f"protobuf>={PROTOBUF_FLOOR},<7"]


def proto_root() -> Path:
    for root in PROTO_ROOTS:
        if any(root.rglob("*.proto")):
            return root
    raise SystemExit(f"no .proto files under {' or '.join(map(str, PROTO_ROOTS))}")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def check_floors(generated: list[Path]) -> None:
    """Fail when the stubs need a newer grpcio or protobuf than the wheel declares."""
    for path in generated:
        text = path.read_text()
        grpc_version = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", text)
        if grpc_version and _version(grpc_version.group(1)) > _version(GRPCIO_FLOOR):
            raise SystemExit(f"{path.name} needs grpcio>={grpc_version.group(1)}, the wheel "
                             f"declares grpcio>={GRPCIO_FLOOR}: build with the pinned "
                             "grpcio-tools or raise the floor in setup.py")
        pb = re.search(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,"
                       r"\s*(\d+),\s*(\d+),\s*(\d+),", text)
        if pb and tuple(map(int, pb.groups())) > _version(PROTOBUF_FLOOR):
            raise SystemExit(f"{path.name} needs protobuf>={'.'.join(pb.groups())}, the wheel "
                             f"declares protobuf>={PROTOBUF_FLOOR}")


def generate(package_dir: Path) -> list[Path]:
    """Compile every proto under proto/movepred into `package_dir` (movepred_client/...)."""
    from grpc_tools import protoc  # a build requirement (pyproject.toml)

    root = proto_root()
    protos = sorted((root / PROTO_PACKAGE).rglob("*.proto"))
    well_known = resources.files("grpc_tools") / "_proto"
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        code = protoc.main(["protoc", f"-I{root}", f"-I{well_known}", f"--python_out={tmp}",
                            f"--pyi_out={tmp}", f"--grpc_python_out={tmp}",
                            *map(str, protos)])
        if code != 0:
            raise SystemExit(f"protoc failed with exit code {code}")
        out_root = Path(tmp) / PROTO_PACKAGE
        for source in sorted(out_root.rglob("*.py*")):
            target = package_dir / source.relative_to(out_root)
            target.parent.mkdir(parents=True, exist_ok=True)
            text = re.sub(rf"^from {PROTO_PACKAGE}(\.| import)", rf"from {PACKAGE}\1",
                          source.read_text(), flags=re.MULTILINE)
            target.write_text(text)
            written.append(target)
    for path in written:  # every generated folder is a package
        for folder in path.relative_to(package_dir).parents:
            (package_dir / folder / "__init__.py").touch()
    check_floors(written)
    return written


class BuildWithStubs(build_py):
    """build_py, then the stubs into the built package (into src/ for an editable install)."""

    def run(self) -> None:
        super().run()
        base = HERE / "src" if getattr(self, "editable_mode", False) else Path(self.build_lib)
        generate(base / PACKAGE)


class SdistWithProto(sdist):
    """An sdist that carries proto/'s .proto files, so a wheel can be built from it alone."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        root = proto_root()
        for proto in sorted(root.rglob("*.proto")):  # the .proto files only
            target = Path(base_dir) / "proto" / proto.relative_to(root)
            if target != proto:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(proto, target)


setup(install_requires=INSTALL_REQUIRES,
      cmdclass={"build_py": BuildWithStubs, "sdist": SdistWithProto})
