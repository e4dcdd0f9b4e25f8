"""Matches between players: engines, the runner, ratings of versions, and the gate as a match.

Modules:
    gtp_process       a GTP program (GNU Go) in a subprocess
    piskvork_process  a Gomocup brain (Piskvork protocol) in a subprocess
    engines           the players behind one interface: `Engine.genmove(state) -> move`
    specs             engines named on a command line (``version:gomoku_policy/3:visits=200``)
    results           a match folder's games log and the standings it gives
    runner            an opening suite, each opening twice with colours swapped, resumable
    ratings           Elo of versions over a ratings log: the PNG plot, the model cards
    gate              the candidate against the serving version, stopped by an SPRT
    cli               ``movepred match`` and ``movepred gate``

It sits above the search (its players search) and the self-play package (whose opening suite
it plays), below the front-ends and flows that call it.
"""
