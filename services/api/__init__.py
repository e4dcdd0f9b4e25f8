"""Generated gRPC/protobuf code for `proto/` (made by `python -m services.api.generate`)."""
