"""Direct policy search: black-box optimisers over a network's flat weight vector, and the
fitness they maximise (games against the Capture Game's greedy player).

Modules:
    base     the ask/tell interface every optimiser implements (maximising, seeded)
    pgpe     policy gradients with parameter-based exploration (symmetric sampling, reward
             normalisation), written here
    es       the (mu, lambda) evolution strategy with self-adaptive local mutation, written here
    cmaes    CMA-ES: an adapter over the `cma` library
    fitness  a population's fitness: games against the greedy player, scaled to [-1, 1]
"""
