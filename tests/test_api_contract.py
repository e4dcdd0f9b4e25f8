"""The API contract: proto/ passes buf's STANDARD lint, and `buf breaking` against the committed
image (proto/api.binpb) catches a breaking change; the generated code registers the file under
its public name, so a client's own stubs of the same file load beside ours in one process.

Once the generated code registered `services/api/movepred/v1/search.proto`: a client that
generated its stubs from proto/ (as `movepred/v1/search.proto`) defined every `movepred.v1`
symbol a second time in the default descriptor pool, and importing both failed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_tools import protoc

from services.api.movepred.v1 import search_pb2

ROOT = Path(__file__).resolve().parents[1]
BUF = ROOT / "scripts" / "buf" / "node_modules" / ".bin" / "buf"
IMAGE = ROOT / "proto" / "api.binpb"
PROTO = ROOT / "proto" / "movepred" / "v1" / "search.proto"
PUBLIC_NAME = "movepred/v1/search.proto"


def buf(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    if not BUF.exists():
        pytest.fail(f"the buf CLI is not installed at {BUF}: run `make setup`")
    return subprocess.run([str(BUF), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def workspace(tmp_path: Path, edit: tuple[str, str] | None = None) -> Path:
    """A copy of buf.yaml and proto/ (the committed image left out), `edit` applied to
    search.proto as (old, new) text."""
    shutil.copy(ROOT / "buf.yaml", tmp_path / "buf.yaml")
    shutil.copytree(ROOT / "proto", tmp_path / "proto", ignore=shutil.ignore_patterns("*.binpb"))
    if edit is not None:
        target = tmp_path / "proto" / "movepred" / "v1" / "search.proto"
        text = target.read_text()
        assert text.count(edit[0]) == 1, edit[0]
        target.write_text(text.replace(*edit))
    return tmp_path


def test_generated_code_registers_the_public_file_name() -> None:
    assert search_pb2.DESCRIPTOR.name == PUBLIC_NAME
    assert search_pb2.DESCRIPTOR.package == "movepred.v1"
    # the classes live in our package (what pickle imports them by)
    assert search_pb2.Point.__module__ == "services.api.movepred.v1.search_pb2"
    # a second pool takes the same file by that name, and finds its symbols there
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(search_pb2.DESCRIPTOR.serialized_pb))
    assert pool.FindMessageTypeByName("movepred.v1.Point").file.name == PUBLIC_NAME
    assert pool.FindFileByName(PUBLIC_NAME).services_by_name["SearchService"]


def test_a_client_generated_from_the_same_file_loads_beside_ours(tmp_path: Path) -> None:
    """A client's stubs, generated from proto/ with `-I proto` as any client would, and ours
    import in one process in either order: one file, one set of symbols, messages of one
    usable in the other."""
    include = resources.files("grpc_tools") / "_proto"
    assert protoc.main(["protoc", f"-I{ROOT / 'proto'}", f"-I{include}",
                        f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}",
                        PUBLIC_NAME]) == 0
    ours = "from services.api.movepred.v1 import search_pb2 as ours, search_pb2_grpc"
    theirs = "from movepred.v1 import search_pb2 as theirs, search_pb2_grpc as theirs_grpc"
    check = (
        "assert theirs.DESCRIPTOR.name == ours.DESCRIPTOR.name == 'movepred/v1/search.proto'\n"
        "assert theirs.DESCRIPTOR.serialized_pb == ours.DESCRIPTOR.serialized_pb\n"
        "position = ours.Position(moves=[theirs.Point(x=7, y=7)], rule=theirs.RULE_RENJU)\n"
        "assert theirs.Position.FromString(position.SerializeToString()) == position\n"
        "print('ok')\n"
    )
    for first, second in ((ours, theirs), (theirs, ours)):
        done = subprocess.run([sys.executable, "-c", f"{first}\n{second}\n{check}"],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"},
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


def test_proto_passes_buf_lint_and_is_not_broken() -> None:
    lint = buf("lint")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    breaking = buf("breaking", "--against", str(IMAGE))
    assert breaking.returncode == 0, breaking.stdout + breaking.stderr


def test_the_committed_image_is_the_api_of_proto(tmp_path: Path) -> None:
    """Every change of proto/ (an added field too) is recorded in the image with
    `make api-image`, so the next change is checked against it; comments are left out."""
    built = buf("build", "--exclude-source-info", "-o", str(tmp_path / "now.binpb"))
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "now.binpb").read_bytes() == IMAGE.read_bytes(), \
        "proto/ changed since proto/api.binpb was written: run `make api-image`"


@pytest.mark.parametrize(("edit", "words"), [
    (("  int32 top_k = 2;  // 0 means 5; applies to every position\n", ""), "top_k"),
    (("  int32 top_k = 2;", "  int64 top_k = 2;"), "top_k"),
    (("  RULE_RENJU = 3;", "  RULE_RENJU_RIF = 3;"), "RULE_RENJU"),
    (("  rpc InferSequence(InferSequenceRequest) returns (InferSequenceResponse);\n", ""),
     "InferSequence"),
], ids=["field removed", "field type changed", "enum value renamed", "rpc removed"])
def test_a_breaking_change_is_caught(tmp_path: Path, edit: tuple[str, str], words: str) -> None:
    breaking = buf("breaking", "--against", str(IMAGE), cwd=workspace(tmp_path, edit))
    assert breaking.returncode != 0, f"{edit} was not caught"
    assert words in breaking.stdout, breaking.stdout + breaking.stderr


def test_an_added_field_is_no_breaking_change(tmp_path: Path) -> None:
    edit = ("  repeated Position positions = 3;",
            "  bool fast = 4;\n  repeated Position positions = 3;")
    breaking = buf("breaking", "--against", str(IMAGE), cwd=workspace(tmp_path, edit))
    assert breaking.returncode == 0, breaking.stdout + breaking.stderr


def test_an_unprefixed_enum_value_fails_lint(tmp_path: Path) -> None:
    """buf's STANDARD rules: a value named without its enum's prefix (as FREESTYLE once was)."""
    lint = buf("lint", cwd=workspace(tmp_path, ("  RULE_FREESTYLE = 1;", "  FREESTYLE = 1;")))
    assert lint.returncode != 0
    assert 'Enum value name "FREESTYLE" should be prefixed with "RULE_"' in lint.stdout, \
        lint.stdout + lint.stderr
