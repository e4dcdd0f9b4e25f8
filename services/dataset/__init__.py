"""Training data: (position, next move) pairs, canonical dedup, Parquet shards and loading.

Modules:
    splits      the split of a position hash (train, validation, test)
    build       .rif records -> raw pairs per source; the in-memory dedup of pair tables
    dedup       dedup, split and shard writing out of core: one DuckDB query over the sources
    shards      the Parquet shards, their schema and writer options, and the manifest
    row_groups  a split's row groups on disk (the loader's units) and reading one
    shuffle     one loader worker's shuffle buffer and the tensors batches are gathered into
    augment     the loader's augmentation: an independent uniform D4 symmetry per row
    loader      the streaming, resumable training loader
"""
