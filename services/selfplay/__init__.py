"""Self-play: the engine plays itself, and its games become training data.

Modules:
    settings  what a self-play game is played with (visits, playout cap randomization,
              exploration, resignation), one dataclass
    openings  balanced opening suites near the centre, distinct under the board's symmetries
    play      one game: a search a move, the targets each full search leaves, the result
    records   a finished game as one JSON file (and its SGF), written atomically
    resign    the resign threshold calibrated from the played-out games' recorded values
    worker    many games at once in one process, all leaves through one batched evaluator;
              kill-safe (a finished game is a file; a restart plays only the missing ones)
"""
