"""Training loop, evaluation and publication gate of policy networks (the TorchScript export is
`services.models.export`).

Modules:
    train        supervised training of a policy network on the shards
    metrics      evaluation: loss, top-1/top-5 accuracy, top-1 by game stage
    gate         the publish gate: a model is published only if it is sound and not worse
    plots        PNG plots of a run: learning curves, top-1 by game stage
    distributed  data-parallel training over processes, GPUs or machines (`torchrun`)
"""
