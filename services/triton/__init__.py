"""Serving the policy networks with a real Triton Inference Server.

Modules:
    server         ``python -m services.triton.server``: run Triton (nvidia-pytriton's
                   ``tritonserver``) on a model repository until stopped
    launcher       `TritonServer`: start and stop ``tritonserver``, each model pinned to its
                   version
    installation   the ``tritonserver`` binary, the python backend folder and the environment
                   the server runs with
    version_choice which version of each model the launcher serves at start
    pid_files      the launchers' pid files: whose server runs on which ports, orphans
    ports          free and taken TCP ports
    health_wait    waiting until the server answers ready
    server_errors  the launcher's errors
    client         `PolicyClient` (gRPC) for policy logits; a model's shapes come from its game
                   (`services.games.registry`)
    rollout        roll a published version in (smoke-tested first) and roll it back
    smoke          the smoke test a version passes before it serves
    cli            `movepred rollout`, `rollback` and `serving`
    policy_model   the python-backend ``model.py`` copied into each version (runs inside
                   Triton, not imported here)

The model repository on disk (versions, publication, the serving record, quarantine) is
`services.repository`, below this package; the training side publishes through it, never
through here. Submodules are imported explicitly (``from services.triton.client import
PolicyClient``) so that importing this package needs neither torch nor tritonclient. Triton's
default address is `services.defaults.TRITON_URL`.
"""
