"""The gRPC stubs of movepred.v1 (`search_pb2`, `search_pb2_grpc`), generated when the wheel is
built from proto/movepred/v1/search.proto (see setup.py); never committed."""
