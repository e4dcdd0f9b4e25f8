"""Game-record formats: RenjuNet `.rif` reading and writing, and rule-based self-play games.

Every reader yields validated games plus one `Rejected` per record it could not ingest, so a
dataset build can account for every record in a file.
"""

from services.records.rif import ReadStats, Rejected, RifGame, read_rif, summarize
from services.records.rif_writer import write_rif

__all__ = ["ReadStats", "Rejected", "RifGame", "read_rif", "summarize", "write_rif"]
