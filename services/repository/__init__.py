"""The model repository on disk: the published versions of each served model and what is
known about them.

Modules:
    versions         a model's version folders: listing, the newest, the next number, the
                     publishers' lock
    configs          a model's ``config.pbtxt``: where it is, parsed, its tensors' names and dims
    publish          publish a TorchScript model as the next version, atomically
    model_check      load a version's TorchScript network and test-run it before it is published
                     (the one module here that needs torch)
    version_files    the files of one published version, checked before anything loads them
    smoke_positions  the real positions stored with a version (``smoke_positions.npz``)
    quarantine       where a version refused for its own fault goes
    rollout_state    the serving record (``<model>/rollout.json``), the rollout lock and the
                     config a stock Triton loads pinned to the record
    model_card       the model card a version's ``metadata.json`` carries
    gate             the publish gate's rule over numbers: the floors of a top-1, the decision

Both the serving side (`services.triton`: launcher, rollout, smoke test) and the training side
(`services.trainer`: the gate's measurement, publication) read and write the repository, so it
sits below both and imports neither. Submodules are imported explicitly; importing this package
needs neither torch nor tritonclient.
"""
