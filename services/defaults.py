"""Addresses, file names and limits that several layers share, written once.

Each is a fact more than one module depends on (the search service's default address is what
the CLI, the GTP and Gomocup engines, the web board and the SGF player connect to; the
TorchScript file name is what the trainer writes, the publisher copies, the version checker
requires and the Triton backend loads). This module sits at the bottom of the import layers
(it imports nothing) so that any module may read it. Makefile, compose and k8s files state the
same values for their own tools; `tests/test_defaults.py` checks they agree.
"""

from __future__ import annotations

# ---- addresses ---------------------------------------------------------------------------
SEARCH_PORT = 50051  # the gRPC search service
SEARCH_TARGET = f"127.0.0.1:{SEARCH_PORT}"  # where every front-end connects unless told
TRITON_GRPC_PORT = 8001
TRITON_URL = f"127.0.0.1:{TRITON_GRPC_PORT}"  # Triton's gRPC address on this machine

# ---- the files of a published model version ----------------------------------------------
MODEL_FILE = "model.pt"  # the TorchScript network
BACKEND_FILE = "model.py"  # Triton's python backend, copied into each version
METADATA_FILE = "metadata.json"  # what the version is (training run, data, figures)
# the rollout's side model of a model under test: <model>__candidate (never served to clients;
# a health check leaves it out)
CANDIDATE_SUFFIX = "__candidate"

# ---- limits ------------------------------------------------------------------------------
# Boards in one Triton call: every served model's max_batch_size, the search's batcher limit
# and the most positions one Predict request may ask about (one request is one Triton batch).
MAX_BATCH_BOARDS = 256

# int8 quantization of a version for CPU serving (`services.repository.quantize`)
QUANTIZE_CALIBRATION = 512  # positions of random games (plus half as many stored real ones)
QUANTIZE_MIN_AGREEMENT = 0.9  # least share of stored positions with the float network's move
