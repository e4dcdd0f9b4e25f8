"""Serving the policy network with a real Triton Inference Server.

Modules:
    server         start/stop ``tritonserver`` (from nvidia-pytriton) on a model repository
    publisher      publish a TorchScript model as the next version, atomically
    version_files  the files of one published version, checked before anything loads them
    client         `PolicyClient` (gRPC) for policy logits; a model's shapes come from its game
                   (`services.games.registry`)
    rollout        roll a published version in (smoke-tested first) and roll it back
    rollout_state  the serving record (``<model>/rollout.json``) and the rollout lock
    smoke          the smoke test a version passes before it serves
    quarantine     where a version refused for its own fault goes
    go_model       TorchScript export and publication of the Go networks
    cli            `movepred rollout`, `rollback` and `serving`
    policy_model   the python-backend ``model.py`` copied into each version (runs inside
                   Triton, not imported here)

Submodules are imported explicitly (``from services.triton.client import PolicyClient``) so that
importing this package needs neither torch nor tritonclient.
"""

# Triton's gRPC address on this machine: what every client and command uses unless told
DEFAULT_TRITON_URL = "127.0.0.1:8001"
