"""Training loop, evaluation and TorchScript export of policy networks."""
