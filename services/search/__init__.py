"""Move search service: PUCT tree search over the policy network, served over gRPC.

Modules:
    mcts        PUCT search for any registered game (talks to any `PolicyEvaluator`, not Triton)
    batcher     merges the evaluations of concurrent searches and Predicts into shared Triton calls
    tree_cache  searched trees kept for the next move of the same game (bounded LRU)
    validation  proto requests -> game states and budgets, or the field that is wrong or too large
    servicer    `movepred.v1.SearchService` (Predict, GenMove, Analyze) of
                `proto/movepred/v1/search.proto`
    server      the gRPC server: the service, health and reflection; `--processes N`
    readiness   health that follows the models' readiness on Triton
    auth        TLS (optionally mutual) and the bearer token
    metrics     Prometheus metrics of the service
    client      the Python client (the `movepred` CLI, tests) and the front-ends' client factory
    advice      what to do about a failed call, the same in every front-end
"""
