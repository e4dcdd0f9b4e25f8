"""Training loop, evaluation and publication of policy networks (the TorchScript export is
`services.models.export`; the model repository they are published into is
`services.repository`).

Modules:
    train        supervised training of a policy network on the shards
    metrics      evaluation: loss, top-1/top-5 accuracy, top-1 by game stage
    publish      every game's one publish path (``python -m services.trainer.publish``): the
                 checked export, the stored positions and the model card of a network, untrained,
                 from a weights file or trained, and the gate measured against the serving
                 version (its rule: `services.repository.gate`)
    plots        PNG plots of a run: learning curves, top-1 by game stage
    distributed  data-parallel training over processes, GPUs or machines (`torchrun`)
    tracking     experiment tracking of a run in MLflow (`--track mlflow`): scalars,
                 parameters, the model card and plots as artefacts; off by default
"""
