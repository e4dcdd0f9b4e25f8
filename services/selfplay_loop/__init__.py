"""The self-play loop's concrete stages: self-play, ingest, train, gate and rollout for any
registered game, run by `services.selfplay.loop.run_loop` (the bookkeeping).

Modules:
    window   the replay window: how many of the newest rows an iteration trains on
    stages   `SelfPlayStages` and its settings (`LoopSettings`)

It sits above `services.match` (the gate is a match) and below the flows.
"""
