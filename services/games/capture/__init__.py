"""The Capture Game (Atari-Go, PyBrain's rules, 5x5 to 9x9): one package owns the game's path.

Modules:
    game   the Capture Game as a `Game` (registered as "capture")
    batch  the game on many boards at once (numba): rules, greedy opponent, `play_games`
"""
