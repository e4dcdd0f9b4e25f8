"""Policy networks and the named configurations that build them.

Modules:
    shao     the move-prediction CNN of Shao et al. 2016
    resnet   residual policy networks (Gomoku; Go with a pass logit)
    value    a value head on any of the policy networks
    mdrnn    the Capture Game's MDRNN / MDLSTM: four diagonal sweeps, any board size
    configs  named model configurations (`shao_f128_n4`, `res_b6c96`, `go_res_b2c32_v`, ...)
    export   TorchScript export, checked against the eager model
"""
