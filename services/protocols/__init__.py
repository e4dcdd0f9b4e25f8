"""Adapters between the search service and the outside world.

`gomocup`: a Gomocup / Piskvork protocol brain (stdin/stdout) that asks the search service for
its moves. `sgf_export`: SGF records of Gomoku games and the `movepred play` self-play command.
"""
