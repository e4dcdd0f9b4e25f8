"""Game-record formats: RenjuNet `.rif` and SGF reading and writing, and rule-based self-play games.

Every reader yields validated games plus one `Rejected` per record it could not ingest, so a
dataset build can account for every record in a file; `summarize` counts any reader's output.

Modules:
    rif         streaming reader of RenjuNet `.rif` XML exports
    rif_writer  writes games as a RenjuNet-style `.rif` file
    sgf         SGF reader (Go), written from scratch, archives included
    sgf_writer  SGF (FF[4]) text of one game
    reasons     quarantine reason categories and read summaries
    selfplay    rule-based Gomoku self-play games (the shipped sample)
"""

from services.records.reasons import ReadStats, summarize
from services.records.rif import Rejected, RifGame, read_rif
from services.records.rif_writer import write_rif

__all__ = ["ReadStats", "Rejected", "RifGame", "read_rif", "summarize", "write_rif"]
