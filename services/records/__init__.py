"""Game-record formats: RenjuNet `.rif` reading and writing, and rule-based self-play games.

Every reader yields validated games plus one `Rejected` per record it could not ingest, so a
dataset build can account for every record in a file; `summarize` counts any reader's output.

Modules: `rif` (.rif reader), `rif_writer`, `sgf` (SGF reader, Go), `sgf_writer` (SGF text
of a game, every game), `reasons` (quarantine reason categories, read summaries), `selfplay`
(rule-based games).
"""

from services.records.reasons import ReadStats, summarize
from services.records.rif import Rejected, RifGame, read_rif
from services.records.rif_writer import write_rif

__all__ = ["ReadStats", "Rejected", "RifGame", "read_rif", "summarize", "write_rif"]
