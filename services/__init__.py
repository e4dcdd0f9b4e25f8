"""The movepred library: games and records, datasets, networks, training, serving and search.

Packages (each lists its modules):
    api         gRPC code generated from `proto/` at setup time (not committed)
    games       the `Game` interface and registry; rules, encodings, symmetries, self-play sample
    records     game-record codecs: readers and writers of .rif and SGF files and archives
    dataset     replay into pairs, canonical dedup, splits, Parquet shards, the streaming loader
    models      policy networks (Shao et al. CNN, residual), value heads, named configurations
    trainer     the training loop, evaluation, the publish gate, data-parallel training
    triton      Triton server, publisher, client, rollout and rollback, the python-backend model
    search      PUCT search and the gRPC search service
    protocols   text-protocol front-ends (Gomocup, GTP) and SGF export of played games
    move_order  which order a set of stones was played in (simulated annealing on policy costs)

Modules:
    atomic_files    files that appear whole or not at all; an exclusive lock between processes
    checksums       file checksums shared by the dataset writer and the model publisher
    compiled        numba kernels: cached on disk where writable, compiled per process elsewhere
    coords          every coordinate system: flat index, RenjuNet names, GTP vertices, SGF letters
    cli             the `movepred` command line
    grpc_options    gRPC channel options of every client (search service, Triton)
    import_closure  the project modules a module imports, found by reading their sources
    logs            one logging set-up for every entry point: plain text or JSON lines
    numerics        numerical helpers of the search service and the rollout checks (numpy only)
    settings        settings dataclasses, the one source of their command-line flags and defaults
"""
