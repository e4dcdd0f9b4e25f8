"""Generated gRPC/protobuf code for `proto/` (made by `python -m services.api.generate`).

Modules:
    generate  writes `movepred/` (the generated code, never committed) from `proto/`
"""
