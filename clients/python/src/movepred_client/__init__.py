"""movepred-client: a thin Python client of the movepred search service.

It needs grpcio and protobuf only. `search_pb2` / `search_pb2_grpc` are the stubs generated
from ``movepred/v1/search.proto`` when the wheel was built; `SearchClient` calls the service
with the platform's TLS and token options; `coords` names points as the service does::

    from movepred_client import SearchClient

    with SearchClient("127.0.0.1:50051") as client:
        reply = client.predict(["h8", "h9", "i8"], top_k=3)
        print([(m.name, m.probability) for m in reply.top_moves])
"""

from __future__ import annotations

from movepred_client.client import (
    ClientConfigError,
    SearchClient,
    enum_value,
    go_point,
    go_position,
    gomoku_point,
    gomoku_position,
    read_token_file,
)
from movepred_client.coords import (
    CoordinateError,
    VertexError,
    gtp_name,
    gtp_vertex,
    index_name,
    parse_gtp_vertex,
    parse_point,
    point_name,
)
from movepred_client.v1 import search_pb2, search_pb2_grpc

__version__ = "0.1.0"
__all__ = [
    "ClientConfigError",
    "CoordinateError",
    "SearchClient",
    "VertexError",
    "enum_value",
    "go_point",
    "go_position",
    "gomoku_point",
    "gomoku_position",
    "gtp_name",
    "gtp_vertex",
    "index_name",
    "parse_gtp_vertex",
    "parse_point",
    "point_name",
    "read_token_file",
    "search_pb2",
    "search_pb2_grpc",
]
