"""Training data: (position, next move) pairs, canonical dedup, Parquet shards and loading."""
