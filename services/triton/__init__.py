"""Serving the policy network with a real Triton Inference Server.

* `server`: start/stop ``tritonserver`` (from nvidia-pytriton) on a model repository.
* `publisher`: publish a TorchScript model as the next version, atomically.
* `client`: `PolicyClient` (gRPC) for policy logits; a model's shapes come from its game
  (`services.games.registry`).
* `policy_model`: the python-backend ``model.py`` copied into each version (runs inside Triton,
  not imported here).

Submodules are imported explicitly (``from services.triton.client import PolicyClient``) so that
importing this package needs neither torch nor tritonclient.
"""

# Triton's gRPC address on this machine: what every client and command uses unless told
DEFAULT_TRITON_URL = "127.0.0.1:8001"
