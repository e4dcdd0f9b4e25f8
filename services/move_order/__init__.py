"""Move-order inference: the most likely order in which the stones of a position were played.

The method is Hsueh & Ikeda (2023), "Inferring move sequences in Go from stone arrangements":
the likelihood of an order is the product of a policy network's probabilities of its moves,
its cost the inverse of their geometric mean (so orders of any length compare), minimised by
simulated annealing from a greedy order. One concept per module:

* `problem`: a stone set validated into a `Problem` (counts, points, the rules of every
  prefix: no illegal move, no capture, no game ending before the last stone);
* `likelihood`: the cost of an order, with the policies of an unchanged prefix cached and the
  changed prefixes of a candidate sent to the evaluator in one batch;
* `greedy`: the greedy initial order;
* `neighbours`: swp2, mov2, rot3 and mix;
* `annealing`: the annealing loop with restarts and a seeded generator, the restarts run
  as chains in lock step (one evaluator call per step for all of them) or one after another.

Everything runs on any `PolicyEvaluator` (services.evaluator): the Triton client, the
search's batcher, or an in-process network.
"""
