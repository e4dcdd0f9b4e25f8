"""Go (9x9 to 19x19): one package owns the game's whole path.

Modules:
    rules            captures, suicide, simple ko, passes, set-up stones, area scoring, replay
    game             Go as a `Game` (registered as "go"), and `GoSearchState`, the position the
                     services play on
    scan             compiled scans of a position: group liberties, legal mask, compact input
    fast             incremental compiled replay that writes a game's compact planes in one pass
    features         compact inputs int8 [4, S, S] (no torch, for the search service)
    planes           the 17 feature planes the basic encoder expands them to (torch)
    tactics          compiled tactical features (capture, self-atari, ladders, sensibleness)
    extended_planes  the extended encoder's compact inputs [10, S, S]
    encoders         the input encoders by name ("basic", "extended")
    replay           SGF records -> packed canonical (position, next move) pairs for the shards
"""
