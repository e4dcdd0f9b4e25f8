"""Serving the policy networks with a real Triton Inference Server.

Modules:
    server         start/stop ``tritonserver`` (from nvidia-pytriton) on a model repository
    client         `PolicyClient` (gRPC) for policy logits; a model's shapes come from its game
                   (`services.games.registry`)
    rollout        roll a published version in (smoke-tested first) and roll it back
    smoke          the smoke test a version passes before it serves
    capture_model  TorchScript export and publication of the Capture Game networks
    cli            `movepred rollout`, `rollback` and `serving`
    policy_model   the python-backend ``model.py`` copied into each version (runs inside
                   Triton, not imported here)

The model repository on disk (versions, publication, the serving record, quarantine) is
`services.repository`, below this package; the training side publishes through it, never
through here. Submodules are imported explicitly (``from services.triton.client import
PolicyClient``) so that importing this package needs neither torch nor tritonclient. Triton's
default address is `services.defaults.TRITON_URL`.
"""
