"""Move search service: PUCT tree search over the policy network, served over gRPC.

`mcts` holds the search (independent of Triton: it talks to any `PolicyEvaluator`),
`validation` turns proto requests into game states, `servicer`/`server` expose the public API of
`proto/movepred/v1/search.proto`, and `client` is the Python client used by `movepred` CLI.
"""
