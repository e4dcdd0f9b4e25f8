"""Game-record formats: RenjuNet `.rif` and SGF reading and writing, as codecs.

Every reader yields validated games plus one `Rejected` per record it could not ingest, so a
dataset build can account for every record in a file; `summarize` counts any reader's output.

The codecs import no game, front-end, search or serving code (only the bottom utilities,
`services.coords` among them): a record's rule stays the name the file gives it, and each game
says what its records mean (`services.games.gomoku.rules.game_rule`, `Game.record_text`).

Modules:
    rif         streaming reader of RenjuNet `.rif` XML exports
    rif_writer  writes games as a RenjuNet-style `.rif` file
    sgf         SGF reader (Go), written from scratch, archives included
    sgf_writer  SGF (FF[4]) text of one game: Gomoku (GM[4]), Go (GM[1]) and any game's nodes
    reasons     quarantine reason categories and read summaries
"""

from services.records.reasons import ReadStats, summarize
from services.records.rif import Rejected, RifGame, read_rif
from services.records.rif_writer import write_rif

__all__ = ["ReadStats", "Rejected", "RifGame", "read_rif", "summarize", "write_rif"]
