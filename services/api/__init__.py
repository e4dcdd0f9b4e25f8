"""The public gRPC API: code generated from `proto/` (made by `python -m services.api.generate`)
and its error model.

Modules:
    generate  writes `movepred/` (the generated code, never committed) from `proto/`, the file
              registered as `movepred/v1/search.proto` as any client's stubs register it
    errors    the status codes the service answers and the google.rpc details it attaches
              (BadRequest field violations, ErrorInfo reasons); docs/api.md shows them
"""
