"""Move search service: PUCT tree search over the policy network, served over gRPC.

`mcts` holds the search (independent of Triton: it talks to any `PolicyEvaluator`),
`validation` turns proto requests into game states (each game's own `position_from_request`,
`services.games`; it names the field that is wrong or over a limit), `batcher` merges the
evaluation requests of concurrent searches and Predict calls into shared Triton calls,
`tree_cache` keeps searched trees for the next move of the same game, `metrics` holds the
Prometheus metrics, `servicer`/`server` expose the public API of
`proto/movepred/v1/search.proto` (Predict, GenMove, Analyze), and `client` is the Python client
used by the `movepred` CLI.
"""
