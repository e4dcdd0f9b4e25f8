"""Training loop, evaluation and publication gate of policy networks (the TorchScript export
is `services.models.export`)."""
