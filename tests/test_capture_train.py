"""The Capture Game policy search: one run's budget, history and checkpoints (a run stopped
between checkpoints and continued ends exactly as an uninterrupted one), lazy evaluation, and
the `capture-train` flow on a reduced grid: in the flow's own process (Prefect's thread runner)
and on a Dask cluster of one worker process through the command line, with the same results."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from services.models.mdrnn import MDRNN
from services.policy_search.runs import RunSpec, load_state, run, weights_fitness


def _same(a, b) -> None:
    ha, hb = a.history, b.history
    assert ha.generation_episodes == hb.generation_episodes
    assert ha.curve_episodes == hb.curve_episodes and ha.curve_fitness == hb.curve_fitness
    assert len(ha.fitness) == len(hb.fitness)
    assert all(np.array_equal(x, y) for x, y in zip(ha.fitness, hb.fitness, strict=True))
    assert np.array_equal(a.mean, b.mean) and a.final_fitness == b.final_fitness


@pytest.mark.parametrize("optimiser", ["pgpe", "es", "cmaes"])
def test_a_stopped_run_continued_from_its_checkpoint_ends_as_a_straight_run(
        tmp_path: Path, optimiser: str) -> None:
    spec = RunSpec("mdrnn", 5, optimiser, run=1, evaluations=200, games=6, curve_step=10,
                   final_games=20)
    straight = run(spec, tmp_path / "straight.pkl", checkpoint_every=2)
    generations = straight.generations
    assert generations >= 6
    # stopped after 5 generations of which 4 were checkpointed: the fifth is lost, as in a kill
    path = tmp_path / "stopped.pkl"
    assert run(spec, path, checkpoint_every=2, stop_after=5) is None
    saved = load_state(path)
    assert saved["generations"] == 4 and not saved["done"]
    assert len(saved["history"].fitness) == 4
    resumed = run(spec, path, checkpoint_every=2)
    _same(straight, resumed)
    assert resumed.generations == generations
    # the budget is spent, and by at most one population more
    spent = straight.history.generation_episodes[-1]
    population = len(straight.history.fitness[-1])
    assert spec.evaluations <= spent < spec.evaluations + population
    # the paper's curve: the candidates' average fitness per 10 episodes, in order
    x, y = straight.population_curve()
    told = np.concatenate(straight.history.fitness)
    assert x[0] == 10 and len(x) == len(y) == int(np.ceil(len(told) / 10))
    assert np.isclose(y[0], told[:10].mean()) and np.isclose(y[-1], told[(len(x) - 1) * 10:].mean())
    # a finished run is read back, not played again
    before = path.stat().st_mtime_ns
    _same(straight, run(spec, path))
    assert path.stat().st_mtime_ns == before


def test_runs_played_together_end_as_each_alone_even_after_a_kill(tmp_path: Path) -> None:
    """Lock step: several runs (different optimisers, budgets and a lazy schedule, so their
    populations, games per candidate and ends differ) share one batch per generation and
    still end exactly as each run alone; a batch killed between checkpoints, with one run
    already further on than the others, resumes to the same ends."""
    from services.policy_search.runs import run_together

    specs = [RunSpec("mdlstm", 5, "pgpe", run=0, evaluations=60, games=4, curve_step=10,
                     final_games=8),
             RunSpec("mdlstm", 5, "pgpe", run=1, evaluations=60, games=4, curve_step=10,
                     final_games=8),
             RunSpec("mdlstm", 5, "es", run=0, evaluations=180, games=4, curve_step=10,
                     final_games=8),
             RunSpec("mdlstm", 5, "cmaes", run=2, evaluations=100, games=3, lazy=(2, 5),
                     curve_step=10, final_games=8)]
    alone = [run(s, tmp_path / "alone" / f"{s.name}.pkl", checkpoint_every=2) for s in specs]
    paths = [tmp_path / "together" / f"{s.name}.pkl" for s in specs]
    # one run goes ahead alone first, then the batch is killed after 3 generations of its own
    assert run(specs[1], paths[1], checkpoint_every=2, stop_after=5) is None
    assert run_together(specs, paths, checkpoint_every=2, stop_after=3) == [None] * 4
    generations = [load_state(p)["generations"] for p in paths]
    assert generations == [2, 6, 2, 2]
    together = run_together(specs, paths, checkpoint_every=2)
    for a, b in zip(alone, together, strict=True):
        _same(a, b)
        assert a.generations == b.generations
    assert len({r.generations for r in together}) > 1  # the runs ended at different generations
    with pytest.raises(ValueError, match="one network and board size"):
        run_together([specs[0], RunSpec("mdlstm", 7, "pgpe")], [paths[0], tmp_path / "x.pkl"])
    with pytest.raises(ValueError, match="the same run twice"):
        run_together([specs[0], specs[0]], [paths[0], tmp_path / "y.pkl"])


def test_batches_group_a_cells_runs_costliest_first() -> None:
    from flows.capture_train import batches, grid_specs

    specs = grid_specs(["mdrnn", "mdlstm"], [5], ["pgpe", "es"], 5, 8, 2, 0, None, 2)
    groups = batches(specs, 2)
    assert [len(g) for g in groups].count(2) == 8 and [len(g) for g in groups].count(1) == 4
    assert all(len({s.cell for s in g}) == 1 for g in groups)
    assert sorted(s.name for g in groups for s in g) == sorted(s.name for s in specs)
    assert groups[0][0].cell == "mdlstm-5x5-pgpe" and groups[-1][0].cell == "mdrnn-5x5-es"
    assert [s.run for g in batches(specs, 10) for s in g][:5] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match=">= 1"):
        batches(specs, 0)


def test_a_co_evolving_run_counts_its_games_keeps_the_greedy_fitness_and_resumes(
        tmp_path: Path) -> None:
    from services.policy_search.runs import run_together

    spec = RunSpec("mdlstm", 5, "pgpe", run=3, evaluations=60, games=4, curve_step=10,
                   final_games=8, coevolution=True)
    assert spec.cell == "mdlstm-5x5-pgpe-coev"
    straight = run(spec, tmp_path / "straight.pkl", checkpoint_every=2)
    h = straight.history
    # the first generation plays the mean only (no best candidate yet), the others both
    assert h.generation_games[0] == 4 + 2 and set(h.generation_games[1:]) == {4 + 4}
    assert h.generation_episodes[-1] * 4 == sum(2 * g for g in h.generation_games)
    assert spec.budget_games <= h.generation_episodes[-1] * 4 < spec.budget_games + 16
    # what the history keeps is the fitness against the greedy player: quarters of 4 games
    assert all(set(np.round(f * 4) / 4) <= set(np.arange(-1, 1.25, 0.5)) for f in h.fitness)
    plain = run(RunSpec("mdlstm", 5, "pgpe", run=3, evaluations=60, games=4, curve_step=10,
                        final_games=8), tmp_path / "plain.pkl")
    assert plain.generations > straight.generations  # the same games buy fewer generations
    # killed between checkpoints and resumed in a batch: the same run
    path = tmp_path / "resumed.pkl"
    assert run(spec, path, checkpoint_every=2, stop_after=5) is None
    (resumed,) = run_together([spec], [path], checkpoint_every=2)
    _same(straight, resumed)


def test_a_length_shaped_run_tells_shaped_fitness_keeps_the_plain_one_and_resumes(
        tmp_path: Path) -> None:
    """Length shaping changes what the optimiser is told, so the run goes elsewhere than the
    plain one from the same start; its history is still the plain fitness (quarters of 4
    games); killed between checkpoints and resumed in a batch it is the same run."""
    from flows.capture_train import _spec, grid_specs
    from services.policy_search.runs import run_together

    spec = RunSpec("mdlstm", 5, "pgpe", run=2, evaluations=60, games=4, curve_step=10,
                   final_games=8, shaping=0.5)
    assert spec.cell == "mdlstm-5x5-pgpe-shape0.5"
    shaped = run(spec, tmp_path / "shaped.pkl", checkpoint_every=2)
    plain = run(RunSpec("mdlstm", 5, "pgpe", run=2, evaluations=60, games=4, curve_step=10,
                        final_games=8), tmp_path / "plain.pkl")
    assert not np.array_equal(shaped.mean, plain.mean)
    assert shaped.generations == plain.generations  # shaping costs no games
    assert all(set(np.round(f * 4) / 4) <= set(np.arange(-1, 1.25, 0.5))
               for f in shaped.history.fitness)
    path = tmp_path / "resumed.pkl"
    assert run(spec, path, checkpoint_every=2, stop_after=5) is None
    (resumed,) = run_together([spec], [path], checkpoint_every=2)
    _same(shaped, resumed)
    with pytest.raises(ValueError, match="shaping"):
        RunSpec("mdlstm", 5, "pgpe", shaping=1.0)
    specs = grid_specs(["mdrnn"], [5], ["pgpe"], 1, 8, 2, 0, None, 2, shaping=0.25)
    assert [s.cell for s in specs] == ["mdrnn-5x5-pgpe", "mdrnn-5x5-pgpe-shape0.25"]
    assert _spec(json.loads(json.dumps(specs[1].__dict__))) == specs[1]


def test_length_shaping_forms_fade_or_spare_the_wins(tmp_path: Path) -> None:
    import argparse

    from flows.capture_train import _shaping

    fading = RunSpec("mdlstm", 5, "pgpe", evaluations=60, games=4, shaping=0.5,
                     shaping_form="fading")
    assert fading.cell == "mdlstm-5x5-pgpe-shape0.5fading"
    assert fading.shaping_now(0) == 0.5
    assert fading.shaping_now(fading.budget_games // 2) == 0.25
    assert fading.shaping_now(fading.budget_games + 8) == 0.0
    losses = RunSpec("mdlstm", 5, "pgpe", run=2, evaluations=60, games=4, curve_step=10,
                     final_games=8, shaping=0.5, shaping_form="losses")
    assert losses.cell == "mdlstm-5x5-pgpe-shape0.5losses" and losses.shaping_now(10**6) == 0.5
    both = run(RunSpec("mdlstm", 5, "pgpe", run=2, evaluations=60, games=4, curve_step=10,
                       final_games=8, shaping=0.5), tmp_path / "both.pkl")
    spared = run(losses, tmp_path / "losses.pkl")
    assert spared.history.generation_episodes == both.history.generation_episodes
    until = RunSpec("mdlstm", 5, "pgpe", shaping=0.5, shaping_form="until")
    assert until.cell == "mdlstm-5x5-pgpe-shape0.5until"
    assert until.shaping_now(10**6) == 0.5 and until.shaping_now(0, reached=True) == 0.0
    assert fading.shaping_now(0, reached=True) == 0.5  # only "until" stops at the threshold
    with pytest.raises(ValueError, match="shaping_form"):
        RunSpec("mdlstm", 5, "pgpe", shaping=0.5, shaping_form="later")
    assert _shaping("0.5") == (0.5, "both") and _shaping("0.3:fading") == (0.3, "fading")
    for bad in ("1.0", "0.5:later", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            _shaping(bad)


def test_a_checkpoint_of_another_run_is_refused(tmp_path: Path) -> None:
    spec = RunSpec("mdrnn", 5, "pgpe", evaluations=8, games=2, final_games=2)
    run(spec, tmp_path / "a.pkl")
    other = RunSpec("mdrnn", 5, "pgpe", seed=1, evaluations=8, games=2, final_games=2)
    with pytest.raises(ValueError, match="another run"):
        run(other, tmp_path / "a.pkl")


def test_runs_differ_by_seed_and_share_the_start_point_across_optimisers(tmp_path: Path) -> None:
    a = run(RunSpec("mdrnn", 5, "pgpe", run=0, evaluations=40, games=4, final_games=4),
            tmp_path / "a.pkl")
    b = run(RunSpec("mdrnn", 5, "pgpe", run=1, evaluations=40, games=4, final_games=4),
            tmp_path / "b.pkl")
    assert not np.array_equal(a.mean, b.mean)
    from services.policy_search.runs import network_for, start_point

    specs = [RunSpec("mdlstm", 7, o, run=3) for o in ("pgpe", "es", "cmaes")]
    x0 = [start_point(s, network_for(s)) for s in specs]
    assert x0[0].shape == (52,) and np.array_equal(x0[0], x0[1]) and np.array_equal(x0[0], x0[2])


def test_lazy_evaluation_grows_the_games_and_spends_the_same_budget(tmp_path: Path) -> None:
    spec = RunSpec("mdlstm", 5, "pgpe", evaluations=60, games=20, lazy=(4, 36),
                   curve_step=10, final_games=10)
    result = run(spec, tmp_path / "lazy.pkl")
    games = result.history.generation_games
    assert games[0] == 4 and games == sorted(games) and 30 <= games[-1] <= 36
    # more generations than a plain run of the same games (2 candidates of 20 games each)
    assert result.generations > spec.evaluations // 2
    spent_games = sum(2 * g for g in games)
    assert spec.budget_games <= spent_games < spec.budget_games + 2 * 36
    assert result.history.generation_episodes[-1] == spent_games / spec.games
    # the curve is sampled at least once per curve_step episodes
    assert np.diff(result.history.curve_episodes).max() < spec.curve_step + 2 * 36 / 20
    assert result.spec.cell == "mdlstm-5x5-pgpe-lazy4to36"


def test_smaller_pgpe_step_sizes_reach_the_optimiser_and_name_their_cell(tmp_path: Path) -> None:
    from flows.capture_train import _spec, grid_specs
    from services.policy_search.runs import make_optimiser

    spec = RunSpec("mdrnn", 5, "pgpe", evaluations=8, games=2, final_games=2,
                   pgpe_steps=(0.1, 0.05))
    opt = make_optimiser(spec, np.zeros(12), seed=0)
    assert (opt.alpha_mu, opt.alpha_sigma) == (0.1, 0.05)
    paper = make_optimiser(RunSpec("mdrnn", 5, "pgpe"), np.zeros(12), seed=0)
    assert (paper.alpha_mu, paper.alpha_sigma) == (0.2, 0.1)
    assert spec.cell == "mdrnn-5x5-pgpe-steps0.1x0.05"
    for bad in [dict(optimiser="es", pgpe_steps=(0.1, 0.05)),
                dict(optimiser="pgpe", pgpe_steps=(0.0, 0.05))]:
        with pytest.raises(ValueError, match="pgpe_steps"):
            RunSpec("mdrnn", 5, **bad)
    # the same samples and fitnesses: the mean moves half as far with alpha_mu 0.1
    for o in (opt, paper):
        for fitness in ([-1.0, -1.0], [0.5, -0.5]):  # the first generation sets the baseline
            o.ask()
            o.tell(np.array(fitness))
    assert np.allclose(opt.mean, paper.mean / 2) and np.abs(paper.mean).max() > 0
    small = run(spec, tmp_path / "small.pkl")
    # the flow adds the variant to PGPE cells only; a JSON round trip gives the spec back
    specs = grid_specs(["mdrnn"], [5], ["pgpe", "es"], 2, 8, 2, 0, None, 2, (0.1, 0.05))
    assert sorted({s.cell for s in specs}) == ["mdrnn-5x5-es", "mdrnn-5x5-pgpe",
                                               "mdrnn-5x5-pgpe-steps0.1x0.05"]
    assert len(specs) == 6
    assert _spec(json.loads(json.dumps(small.summary()["spec"]))) == spec


def test_pgpe_memory_reaches_the_optimiser_names_its_cell_and_resumes(tmp_path: Path) -> None:
    from flows.capture_train import _spec, grid_specs
    from services.policy_search.runs import make_optimiser

    spec = RunSpec("mdrnn", 5, "pgpe", evaluations=8, games=2, final_games=2, pgpe_memory=50)
    specs = grid_specs(["mdrnn"], [5], ["pgpe", "es"], 1, 8, 2, 0, None, 2, pgpe_memory=50)
    assert [s.cell for s in specs] == ["mdrnn-5x5-pgpe", "mdrnn-5x5-pgpe-memory50",
                                       "mdrnn-5x5-es"]
    assert make_optimiser(spec, np.zeros(12), seed=0).memory == 50
    assert make_optimiser(RunSpec("mdrnn", 5, "pgpe"), np.zeros(12), seed=0).memory is None
    assert spec.cell == "mdrnn-5x5-pgpe-memory50"
    for bad in [dict(optimiser="es", pgpe_memory=50), dict(optimiser="pgpe", pgpe_memory=-1)]:
        with pytest.raises(ValueError, match="pgpe_memory"):
            RunSpec("mdrnn", 5, **bad)
    straight = run(spec, tmp_path / "straight.pkl")
    assert run(spec, tmp_path / "stopped.pkl", checkpoint_every=1, stop_after=2) is None
    resumed = run(spec, tmp_path / "stopped.pkl")
    assert resumed.final_fitness == straight.final_fitness
    np.testing.assert_array_equal(resumed.mean, straight.mean)
    assert _spec(json.loads(json.dumps(straight.summary()["spec"]))) == spec


def test_a_cmaes_population_reaches_the_optimiser_and_names_its_cell(tmp_path: Path) -> None:
    from flows.capture_train import grid_specs, main
    from services.policy_search.runs import make_optimiser

    spec = RunSpec("mdlstm", 5, "cmaes", cmaes_popsize=60)
    assert make_optimiser(spec, np.zeros(52), seed=0).popsize == 60
    assert make_optimiser(RunSpec("mdlstm", 5, "cmaes"), np.zeros(52), seed=0).popsize == 15
    assert spec.cell == "mdlstm-5x5-cmaes-pop60"
    specs = grid_specs(["mdlstm"], [5], ["pgpe", "cmaes"], 1, 8, 2, 0, None, 2, cmaes_popsize=60)
    assert [s.cell for s in specs] == ["mdlstm-5x5-pgpe", "mdlstm-5x5-cmaes",
                                       "mdlstm-5x5-cmaes-pop60"]
    for option in (["--cmaes-popsize", "1"], ["--pgpe-memory", "-1"]):
        with pytest.raises(SystemExit):
            main(["--out", str(tmp_path / "grid"), *option])
    for bad in [dict(optimiser="pgpe", cmaes_popsize=60), dict(optimiser="cmaes", cmaes_popsize=1)]:
        with pytest.raises(ValueError, match="cmaes_popsize"):
            RunSpec("mdlstm", 5, **bad)


def test_common_draws_reach_the_games_name_their_cell_and_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.capture_train import grid_specs
    from services.policy_search import runs as runs_module

    spec = RunSpec("mdrnn", 5, "cmaes", evaluations=22, games=2, final_games=2,
                   common_draws=True)
    assert spec.cell == "mdrnn-5x5-cmaes-common" and spec.draws_shared_by(11) == 11
    assert spec.draws_shared_by(0) == 1  # generation_fitness takes groups of at least one
    assert RunSpec("mdrnn", 5, "pgpe").draws_shared_by(2) == 1
    told = []
    original = runs_module.generation_fitness

    def spy(*args, **kwargs):
        told.append(args[-1] if len(args) > 8 else kwargs.get("shared"))
        return original(*args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(runs_module, "generation_fitness", spy)
        straight = run(spec, tmp_path / "straight.pkl")
    assert told == [[11], [11]]  # CMA-ES's population of 11 for 12 weights, two generations
    assert run(spec, tmp_path / "stopped.pkl", checkpoint_every=1, stop_after=1) is None
    resumed = run(spec, tmp_path / "stopped.pkl")
    np.testing.assert_array_equal(resumed.mean, straight.mean)
    assert resumed.final_fitness == straight.final_fitness
    specs = grid_specs(["mdrnn"], [5], ["pgpe", "es"], 1, 8, 2, 0, None, 2, common_draws=True)
    assert [s.cell for s in specs] == ["mdrnn-5x5-pgpe", "mdrnn-5x5-pgpe-common",
                                       "mdrnn-5x5-es", "mdrnn-5x5-es-common"]


def test_cmaes_restarts_reach_the_optimiser_name_their_cell_and_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.capture_train import _spec, grid_specs
    from services.policy_search.cmaes import CMAES
    from services.policy_search.runs import make_optimiser

    spec = RunSpec("mdrnn", 5, "cmaes", evaluations=300, games=2, final_games=4, restarts=True)
    assert spec.cell == "mdrnn-5x5-cmaes-ipop"
    assert make_optimiser(spec, np.zeros(12), seed=0).restarts
    assert not make_optimiser(RunSpec("mdrnn", 5, "cmaes"), np.zeros(12), seed=0).restarts
    with pytest.raises(ValueError, match="restarts are for cmaes only"):
        RunSpec("mdrnn", 5, "pgpe", restarts=True)
    # a run long enough for two windows restarts, and a killed one resumes to the same end
    # (windows of 10 generations, MIN_WINDOW, of 11 candidates; killed before the restart)
    monkeypatch.setattr("services.policy_search.cmaes.STAGNATION_EPISODES", 60)
    straight = run(spec, tmp_path / "straight.pkl", checkpoint_every=4)
    path = tmp_path / "stopped.pkl"
    assert run(spec, path, checkpoint_every=4, stop_after=19) is None
    assert load_state(path)["optimiser"].restarts_done == 0
    resumed = run(spec, path, checkpoint_every=4)
    _same(straight, resumed)
    assert straight.restarts >= 1 and straight.summary()["restarts"] == straight.restarts
    assert isinstance(load_state(path)["optimiser"], CMAES)
    # the flow adds the variant to CMA-ES cells only; a JSON round trip gives the spec back
    specs = grid_specs(["mdrnn"], [5], ["pgpe", "cmaes"], 2, 8, 2, 0, None, 2, restarts=True)
    assert sorted({s.cell for s in specs}) == ["mdrnn-5x5-cmaes", "mdrnn-5x5-cmaes-ipop",
                                               "mdrnn-5x5-pgpe"]
    assert _spec(json.loads(json.dumps(straight.summary()["spec"]))) == spec


def test_an_opponent_curriculum_weakens_the_early_games_only_and_resumes(
        tmp_path: Path) -> None:
    """The opponent's random share falls from 1 to 0 over the curriculum's share of the budget;
    the run's early candidates win more than the plain run's from the same start, its curve and
    final fitness are against the greedy player itself; killed and resumed, the same run."""
    from flows.capture_train import _spec, grid_specs
    from services.policy_search.runs import run_together

    spec = RunSpec("mdlstm", 5, "pgpe", run=2, evaluations=60, games=4, curve_step=10,
                   final_games=8, curriculum=0.5)
    assert spec.cell == "mdlstm-5x5-pgpe-curriculum0.5"
    budget = spec.budget_games
    assert [spec.random_share_now(g) for g in (0, budget // 4, budget // 2, budget)] == [
        1.0, 0.5, 0.0, 0.0]
    assert RunSpec("mdlstm", 5, "pgpe").random_share_now(0) == 0.0
    taught = run(spec, tmp_path / "taught.pkl", checkpoint_every=2)
    plain = run(RunSpec("mdlstm", 5, "pgpe", run=2, evaluations=60, games=4, curve_step=10,
                        final_games=8), tmp_path / "plain.pkl")
    assert taught.generations == plain.generations  # the same games, other opponents
    early = slice(0, 5)
    assert (np.concatenate(taught.history.fitness[early]).mean()
            > np.concatenate(plain.history.fitness[early]).mean())
    path = tmp_path / "resumed.pkl"
    assert run(spec, path, checkpoint_every=2, stop_after=5) is None
    (resumed,) = run_together([spec], [path], checkpoint_every=2)
    _same(taught, resumed)
    with pytest.raises(ValueError, match="curriculum"):
        RunSpec("mdlstm", 5, "pgpe", curriculum=1.5)
    import argparse

    from flows.capture_train import _share

    assert _share("0.25") == 0.25
    for bad in ("0", "1.5", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            _share(bad)
    specs = grid_specs(["mdrnn"], [5], ["pgpe"], 1, 8, 2, 0, None, 2, curriculum=0.25)
    assert [s.cell for s in specs] == ["mdrnn-5x5-pgpe", "mdrnn-5x5-pgpe-curriculum0.25"]
    assert _spec(json.loads(json.dumps(specs[1].__dict__))) == specs[1]


def test_a_scouting_run_starts_its_optimiser_from_the_confirmed_draw_and_resumes(
        tmp_path: Path) -> None:
    """Scouting spends its draws and confirmation inside the budget (one generation each here),
    then PGPE starts from the confirmed draw; killed during the draws or the confirmation and
    resumed, the run ends as a straight one; the flow adds the variant and the CLI refuses a
    scout that leaves the optimiser nothing."""
    from flows.capture_train import _spec, grid_specs, main
    from services.policy_search.runs import SCOUT_REPEATS, SCOUT_SHORTLIST, run_together
    from services.policy_search.scout import Scouted

    spec = RunSpec("mdlstm", 5, "pgpe", run=3, evaluations=300, games=2, curve_step=20,
                   final_games=8, scout=150)
    assert spec.cell == "mdlstm-5x5-pgpe-scout150"
    straight = run(spec, tmp_path / "straight.pkl", checkpoint_every=1)
    sizes = [len(f) for f in straight.history.fitness]
    assert sizes[:3] == [100, 50, SCOUT_SHORTLIST * SCOUT_REPEATS] and set(sizes[3:]) == {2}
    assert straight.history.generation_episodes[-1] >= 300
    opt = load_state(tmp_path / "straight.pkl")["optimiser"]
    assert isinstance(opt, Scouted) and opt.phase == "optimiser"
    repeats = straight.history.fitness[2].reshape(SCOUT_SHORTLIST, SCOUT_REPEATS).mean(1)
    assert opt.start_fitness == pytest.approx(float(repeats.max()))
    assert np.array_equal(opt.inner.mean, straight.mean)
    for stop in (1, 2, 3):  # during the draws, before the confirmation, after it
        path = tmp_path / f"stopped{stop}.pkl"
        assert run(spec, path, checkpoint_every=1, stop_after=stop) is None
        (resumed,) = run_together([spec], [path], checkpoint_every=1)
        _same(straight, resumed)
    for bad in (5, 100, 190):  # fewer draws than the shortlist; no episodes left after them
        with pytest.raises(ValueError, match="scout"):
            RunSpec("mdlstm", 5, "pgpe", evaluations=200, scout=bad)
    specs = grid_specs(["mdrnn"], [5], ["pgpe", "es"], 1, 300, 2, 0, None, 2, scout=50)
    assert [s.cell for s in specs] == ["mdrnn-5x5-pgpe", "mdrnn-5x5-pgpe-scout50",
                                       "mdrnn-5x5-es", "mdrnn-5x5-es-scout50"]
    assert _spec(json.loads(json.dumps(specs[1].__dict__))) == specs[1]
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "grid"), "--evaluations", "100", "--scout", "50"])


def test_a_cmaes_first_run_hands_off_to_pgpe_and_resumes_across_the_handoff(
        tmp_path: Path) -> None:
    """CMA-ES's generations (15 candidates) until the hand-off, then PGPE's pairs from
    CMA-ES's mean; killed before or after the hand-off and resumed, the run ends as a straight
    one; the flow adds the variant to PGPE cells only."""
    from flows.capture_train import _spec, grid_specs, main
    from services.policy_search.handoff import Handoff
    from services.policy_search.pgpe import PGPE
    from services.policy_search.runs import run_together

    spec = RunSpec("mdlstm", 5, "pgpe", run=4, evaluations=200, games=2, curve_step=20,
                   final_games=8, cmaes_first=60)
    assert spec.cell == "mdlstm-5x5-pgpe-cmaesfirst60"
    straight = run(spec, tmp_path / "straight.pkl", checkpoint_every=1)
    sizes = [len(f) for f in straight.history.fitness]
    assert sizes[:4] == [15] * 4 and set(sizes[4:]) == {2}
    opt = load_state(tmp_path / "straight.pkl")["optimiser"]
    assert isinstance(opt, Handoff) and isinstance(opt.second, PGPE)
    assert opt.handed_off_at == 60 and opt.second.evaluations == sum(sizes[4:])
    assert np.array_equal(opt.second.mean, straight.mean)
    for stop in (2, 5):  # during CMA-ES, after the hand-off
        path = tmp_path / f"stopped{stop}.pkl"
        assert run(spec, path, checkpoint_every=1, stop_after=stop) is None
        (resumed,) = run_together([spec], [path], checkpoint_every=1)
        _same(straight, resumed)
    for bad in ({"cmaes_first": 200}, {"cmaes_first": 50, "optimiser": "es"}):
        with pytest.raises(ValueError, match="cmaes_first"):
            RunSpec(**{"network": "mdlstm", "size": 5, "optimiser": "pgpe",
                       "evaluations": 200, **bad})
    specs = grid_specs(["mdrnn"], [5], ["pgpe", "cmaes"], 1, 300, 2, 0, None, 2,
                       cmaes_first=100)
    assert [s.cell for s in specs] == ["mdrnn-5x5-pgpe", "mdrnn-5x5-pgpe-cmaesfirst100",
                                       "mdrnn-5x5-cmaes"]
    assert _spec(json.loads(json.dumps(specs[1].__dict__))) == specs[1]
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "grid"), "--evaluations", "100", "--cmaes-first", "100"])


def test_a_checkpoint_older_than_a_spec_field_is_read_back(tmp_path: Path) -> None:
    """A finished run whose checkpoint was written before `pgpe_steps` existed is still the
    same run: read back, not refused and not replayed."""
    import pickle

    spec = RunSpec("mdrnn", 5, "pgpe", evaluations=8, games=2, final_games=2)
    path = tmp_path / "old.pkl"
    first = run(spec, path)
    state = load_state(path)
    del state["spec"]["pgpe_steps"]
    path.write_bytes(pickle.dumps(state))
    before = path.stat().st_mtime_ns
    _same(first, run(spec, path))
    assert path.stat().st_mtime_ns == before


def test_weights_fitness_plays_any_board_size() -> None:
    weights = MDRNN(2, seed=3).get_flat().numpy()
    for size in (5, 7, 9):
        f = weights_fitness("mdrnn", weights, size, games=8)
        assert -1.0 <= f <= 1.0 and (f * 8) % 2 == 0  # 8 games of +-1


GRID = dict(networks=["mdrnn"], sizes=[5], optimisers=["pgpe", "cmaes"], runs=2,
            evaluations=24, games=4, seed=5, lazy=(2, 6), checkpoint_every=3, final_games=8)


def _results(out: Path) -> dict:
    return {r["name"]: r for r in json.loads((out / "results.json").read_text())}


def test_the_flow_runs_the_grid_writes_its_outputs_and_resumes(tmp_path: Path,
                                                               prefect_harness) -> None:
    """The flow in its own process (Prefect's default thread runner): files, artifacts, table,
    the best network, the generalisation; a rerun reads every run back; a run left half done
    is continued from its checkpoint to the result it would have had."""
    from prefect.artifacts import Artifact

    from flows.capture_train import capture_train

    out = tmp_path / "grid"
    first = capture_train(out_dir=str(out), generalise_sizes=[7], **GRID)
    cells = ["mdrnn-5x5-pgpe", "mdrnn-5x5-pgpe-lazy2to6", "mdrnn-5x5-cmaes",
             "mdrnn-5x5-cmaes-lazy2to6"]
    assert [row["cell"] for row in first["cells"]] == cells and first["runs"] == 8
    results = _results(out)
    assert len(results) == 8 and len(list((out / "runs").glob("*.pkl"))) == 8
    for row in first["cells"]:
        finals = [r["final_fitness"] for r in results.values() if r["cell"] == row["cell"]]
        assert row["runs"] == 2 and row["best"] == round(max(finals), 4)
        assert row["final_mean"] == round(float(np.mean(finals)), 4)
        assert f"| {row['cell']} | 2 |" in (out / "table.md").read_text()
    table = json.loads(Artifact.get("capture-train-table").data)
    assert [r["cell"] for r in table] == cells
    assert "best_network.pt" in Artifact.get("capture-train-summary").data
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    best = max(results.values(), key=lambda r: r["final_fitness"])
    saved = torch.load(out / "best_network.pt", weights_only=True)
    assert saved["config"] == "capture_mdrnn_k2" and saved["run"] == best["name"]
    net = MDRNN(2)
    net.load_state_dict(saved["model"])
    assert np.allclose(net.get_flat().numpy(), best["mean"], atol=1e-6)
    # the best run of every 5x5 cell, on 5x5 (its final fitness) and on 7x7
    generalised = {g["name"]: g["fitness"] for g in first["generalisation"]}
    assert set(generalised) == {row["best_run"] for row in first["cells"]}
    assert all(set(f) == {5, 7} for f in generalised.values())
    assert generalised[best["name"]][5] == best["final_fitness"]

    # a rerun plays nothing: every run is read back from its finished checkpoint
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.pkl")}
    again = capture_train(out_dir=str(out), generalise_sizes=[7], **GRID)
    assert again["cells"] == first["cells"] and _results(out) == results
    assert {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.pkl")} == stamps

    # a run stopped between checkpoints (as by a kill) is continued by the flow
    other = tmp_path / "other"
    name = "mdrnn-5x5-pgpe-run01"
    spec = RunSpec(**{**results[name]["spec"], "lazy": None})
    assert run(spec, other / "runs" / f"{name}.pkl", checkpoint_every=3, stop_after=7) is None
    assert load_state(other / "runs" / f"{name}.pkl")["generations"] == 6
    capture_train(out_dir=str(other), generalise_sizes=[], **GRID)
    assert _results(other) == results


def test_the_command_line_on_a_dask_cluster_gives_the_same_results(tmp_path: Path,
                                                                   prefect_harness,
                                                                   capsys) -> None:
    """`python -m flows.capture_train --address`: the runs on a Dask worker process (tasks and
    results cross a process boundary) give the results the flow's own process gives."""
    from distributed import LocalCluster

    from flows.capture_train import capture_train, capture_train_on, main

    grid = {**GRID, "optimisers": ["es"], "runs": 2, "lazy": None}
    local = tmp_path / "local"
    capture_train(out_dir=str(local), generalise_sizes=[], **grid)  # the two runs together
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:
        out = tmp_path / "dask"
        main(["--out", str(out), "--networks", "mdrnn", "--sizes", "5", "--optimisers", "es",
              "--runs", "2", "--evaluations", "24", "--games", "4", "--seed", "5",
              "--final-games", "8", "--checkpoint-every", "3", "--generalise", "7",
              "--together", "1", "--address", cluster.scheduler_address])
    printed = capsys.readouterr().out
    assert "| mdrnn-5x5-es | 2 |" in printed and "best run: mdrnn-5x5-es-run0" in printed
    # each run its own task on the worker: the same results as the two in lock step
    assert _results(out) == _results(local)
    # --replot draws a finished grid's Fig. 3 again (at the docs' dpi) and runs nothing
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.pkl")}
    small, big = tmp_path / "small.png", tmp_path / "big.png"
    main(["--out", str(out), "--replot", str(small), "--dpi", "45"])
    main(["--out", str(out), "--replot", str(big), "--dpi", "90"])
    assert small.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert small.stat().st_size < big.stat().st_size
    assert {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.pkl")} == stamps
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "nothing"), "--replot", str(small)])
    # the docs' read-out of a finished grid: its cell, the games it played, the CPU estimate
    import subprocess
    import sys

    both = list(_results(out).values())
    games = sum(round(r["episodes"] * 4) + 4 * len(r["curve_fitness"]) + 8 for r in both)
    claims = subprocess.run([sys.executable, "scripts/capture_claims.py", str(out),
                             "--cpu-seconds", "2", "--at", "12,24", "--saturation", "2",
                             "--good", "-2"], capture_output=True,
                            text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    text = claims.stdout
    finals = np.array([r["final_fitness"] for r in both])
    assert f"| mdrnn-5x5-es | 2 | {finals.mean():+.3f} ± {finals.std():.3f} |" in text
    assert f"2 runs of 24 episodes: {games:,} games played" in text
    assert f"{games / 2:,.0f} games per CPU-s" in text and "| cell | 12 | 24 |" in text
    # the saturation read-out: every run in the ">= -2" group, its norm read off the weights
    row = next(line for line in text.splitlines() if line.startswith("| mdrnn-5x5-es | >= -2 |"))
    norms = [np.linalg.norm(r["mean"]) for r in both]
    assert f"| 2 | {np.median(norms):.1f} ({min(norms):.1f}-{max(norms):.1f}) |" in row
    share = float(row.split("|")[5].split()[0])
    assert 0.0 <= share <= 1.0
    # --workers N starts a local cluster of N processes for the run
    runner = capture_train_on(workers=2).task_runner
    assert runner.cluster_kwargs["n_workers"] == 2 and runner.cluster_kwargs["processes"]


def test_the_grid_benchmark_checks_lock_step_against_one_run_at_a_time() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "benchmarks/capture_grid.py", "--network", "mdrnn",
                           "--runs", "2", "--evaluations", "12"], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert "results identical: yes" in done.stdout
    assert "x one after another" in done.stdout and "games per CPU-s" in done.stdout


def test_shaping_until_even_stops_at_the_first_even_candidate_and_resumes(tmp_path: Path) -> None:
    """The "until" form tells shaped fitness until a candidate first scores >= 0 against the
    greedy player and the plain fitness from the next generation on; the switch is in the
    checkpoint (not before the generation that reaches it), so a run killed after it and
    resumed is the same run."""
    from services.policy_search.runs import run_together

    spec = RunSpec("mdrnn", 5, "es", run=1, evaluations=300, games=4, curve_step=50,
                   final_games=8, shaping=0.5, shaping_form="until")
    straight = run(spec, tmp_path / "until.pkl", checkpoint_every=2)
    state = load_state(tmp_path / "until.pkl")
    reached = [i for i, f in enumerate(straight.history.fitness) if f.max() >= 0]
    assert reached and state["shaping_reached"] is True
    first = reached[0]
    # stopped before the switch, its checkpoint has not switched
    early = tmp_path / "early.pkl"
    assert first >= 2
    assert run(spec, early, checkpoint_every=1, stop_after=first) is None
    assert load_state(early).get("shaping_reached", False) is False
    path = tmp_path / "resumed.pkl"
    assert run(spec, path, checkpoint_every=2, stop_after=first + 3) is None
    (resumed,) = run_together([spec], [path], checkpoint_every=2)
    _same(straight, resumed)


def _live_run(spec: RunSpec, generations: list[tuple[int, float]]):
    """A `_LiveRun` of `spec` whose history holds `generations` (games spent after each, the
    candidates' fitness, two candidates each), as the run loop leaves it."""
    from services.policy_search.runs import _fresh_state, _LiveRun, network_for

    net = network_for(spec)
    state = _fresh_state(spec, net)
    h = state["history"]
    for spent, fitness in generations:
        h.generation_episodes.append(spent / spec.games)
        h.fitness.append(np.full(2, fitness, np.float32))
    state["spent"] = generations[-1][0]
    rng = np.random.default_rng(0)
    return net, _LiveRun(spec, Path("unused.pkl"), state, rng, rng)


def test_a_stuck_chain_is_abandoned_for_a_fresh_start_only_when_the_rule_says() -> None:
    from services.policy_search.runs import next_chain, start_point

    # budget 60 episodes of 2 games; look after 20 episodes (40 games), at the last fifth:
    # the generations after 16 episodes (32 games)
    spec = RunSpec("mdrnn", 5, "cmaes", evaluations=60, games=2, abandon=(20, -0.5))
    assert spec.cell == "mdrnn-5x5-cmaes-abandon20below-0.5"
    early = [(8, -1.0), (16, -1.0), (24, 0.9), (32, 0.9)]  # good before the window
    net, live = _live_run(spec, [*early, (36, -0.6), (40, -0.6)])
    first = live.opt
    live.abandon_if_stuck(net, spent_before=36)
    assert live.state["chains"] == 2 and live.state["chain_start"] == 40
    assert live.opt is not first
    np.testing.assert_array_equal(live.opt.mean, start_point(spec, net, chain=1))
    assert not np.array_equal(start_point(spec, net, chain=1), start_point(spec, net))
    np.testing.assert_array_equal(next_chain(spec, net, 1).ask(), next_chain(spec, net, 1).ask())
    # the next chain is looked at after its own 20 episodes: 40 + 40 = 80 games > half the
    # budget (60 games), so it runs to the end whatever it scores
    live.state["history"].generation_episodes.append(41.0)
    live.state["history"].fitness.append(np.full(2, -1.0, np.float32))
    live.state["spent"] = 82
    live.abandon_if_stuck(net, spent_before=78)
    assert live.state["chains"] == 2
    for generations, spent_before, why in [
            ([*early, (36, -0.5), (40, -0.5)], 36, "at the threshold"),
            ([*early, (36, -1.0), (40, 0.0)], 36, "the window's mean is -0.5"),
            ([*early, (36, -1.0), (38, -1.0)], 36, "not yet 20 episodes"),
            ([*early, (40, -1.0), (44, -1.0)], 40, "looked at already")]:
        net, live = _live_run(spec, generations)
        live.abandon_if_stuck(net, spent_before)
        assert "chains" not in live.state, why
    # without the option nothing is looked at
    net, live = _live_run(RunSpec("mdrnn", 5, "cmaes", evaluations=100, games=2),
                          [(36, -1.0), (40, -1.0)])
    live.abandon_if_stuck(net, 36)
    assert "chains" not in live.state


def test_an_abandoning_run_counts_one_budget_resumes_across_the_change_and_names_its_cell(
        tmp_path: Path) -> None:
    from flows.capture_train import _spec, grid_specs, main

    # fitness 1.0 is above any chain's: the first start is dropped after 50 episodes
    spec = RunSpec("mdrnn", 5, "cmaes", evaluations=200, games=2, final_games=4,
                   abandon=(50, 1.0))
    straight = run(spec, tmp_path / "straight.pkl", checkpoint_every=3)
    assert straight.chains == 2 and straight.summary()["chains"] == 2
    state = load_state(tmp_path / "straight.pkl")
    assert 100 <= state["chain_start"] < 100 + 2 * 11  # one generation of 11 past 50 episodes
    # the second chain's optimiser counts only its own evaluations; the run's budget is one
    assert state["optimiser"].evaluations * 2 == state["spent"] - state["chain_start"]
    spent = straight.history.generation_episodes[-1]
    assert spec.evaluations <= spent < spec.evaluations + 11
    # killed before the change and after it, resumed to the same end
    for stop in (3, 7):
        path = tmp_path / f"stopped{stop}.pkl"
        assert run(spec, path, checkpoint_every=3, stop_after=stop) is None
        _same(straight, run(spec, path, checkpoint_every=3))
    specs = grid_specs(["mdrnn"], [5], ["pgpe"], 1, 8, 2, 0, None, 2, abandon=(2, -0.5))
    assert [s.cell for s in specs] == ["mdrnn-5x5-pgpe", "mdrnn-5x5-pgpe-abandon2below-0.5"]
    assert _spec(json.loads(json.dumps(straight.summary()["spec"]))) == spec
    for bad in [(0, -0.5), (101, -0.5), (50, -1.0), (50, 1.5), (50,)]:
        with pytest.raises(ValueError, match="abandon"):
            RunSpec("mdrnn", 5, "pgpe", evaluations=200, abandon=bad)
    for option in (["--abandon", "x:y"], ["--abandon", "7000:-0.5"]):
        with pytest.raises(SystemExit):
            main(["--out", str(tmp_path / "grid"), *option])


def test_weight_decay_tells_the_fitness_less_the_mean_squared_weight_and_keeps_the_plain_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.capture_train import _spec, grid_specs, main
    from services.policy_search.cmaes import CMAES

    spec = RunSpec("mdrnn", 5, "cmaes", evaluations=33, games=2, final_games=2,
                   weight_decay=0.5)
    assert spec.cell == "mdrnn-5x5-cmaes-decay0.5"
    asked, told = [], []
    ask, tell = CMAES.ask, CMAES.tell

    def spy_ask(self):
        asked.append(ask(self))
        return asked[-1].copy()

    def spy_tell(self, fitnesses):
        told.append(np.asarray(fitnesses, np.float64).copy())
        return tell(self, fitnesses)

    monkeypatch.setattr(CMAES, "ask", spy_ask)
    monkeypatch.setattr(CMAES, "tell", spy_tell)
    result = run(spec, tmp_path / "decay.pkl")
    assert len(asked) == len(told) == len(result.history.fitness) == 3
    for population, fitness, t in zip(asked, result.history.fitness, told, strict=True):
        assert set(np.unique(fitness)) <= {-1.0, 0.0, 1.0}  # the plain fitness of two games
        decay = 0.5 * np.mean(population ** 2, axis=1)
        assert decay.min() > 0.1  # N(0, 1) weights: the penalty is there to see
        np.testing.assert_allclose(t, fitness - decay, atol=1e-6)
    assert _spec(json.loads(json.dumps(result.summary()["spec"]))) == spec
    specs = grid_specs(["mdrnn"], [5], ["es"], 1, 8, 2, 0, None, 2, weight_decay=0.01)
    assert [s.cell for s in specs] == ["mdrnn-5x5-es", "mdrnn-5x5-es-decay0.01"]
    # --combine: the options in one cell per plain cell (those of its optimiser), which is how
    # the flow runs the docs' best recipe
    specs = grid_specs(["mdlstm"], [5], ["pgpe", "cmaes"], 1, 9250, 40, 0, (10, 70), 400,
                       cmaes_popsize=30, weight_decay=0.01, combine=True)
    assert [s.cell for s in specs] == ["mdlstm-5x5-pgpe", "mdlstm-5x5-pgpe-lazy10to70-decay0.01",
                                       "mdlstm-5x5-cmaes",
                                       "mdlstm-5x5-cmaes-pop30-lazy10to70-decay0.01"]
    assert specs[-1] == RunSpec("mdlstm", 5, "cmaes", evaluations=9250, cmaes_popsize=30,
                                lazy=(10, 70), weight_decay=0.01)
    assert grid_specs(["mdrnn"], [5], ["es"], 1, 8, 2, 0, None, 2, combine=True) == \
        grid_specs(["mdrnn"], [5], ["es"], 1, 8, 2, 0, None, 2)
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="weight_decay"):
            RunSpec("mdrnn", 5, "pgpe", weight_decay=bad)
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "grid"), "--weight-decay", "2"])


def test_bad_grid_options_are_usage_errors_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--checkpoint-every 0 was a ZeroDivisionError after the first generation, --generalise
    25 a failure after the whole grid had run, --sizes 3 one when its cell came to be played,
    a negative --workers or --seed a traceback."""
    from flows.capture_train import main

    out = tmp_path / "grid"
    for flag, message in ((["--checkpoint-every", "0"], "must be in 1..1000000"),
                          (["--generalise", "5,25"], "comma-separated values of (5, 6, 7, 8, 9)"),
                          (["--sizes", "3"], "comma-separated values of (5, 6, 7, 8, 9)"),
                          (["--workers", "-1"], "must be in 0..1024"),
                          (["--seed", "-1"], "must be in 0.."),
                          (["--runs", "0"], "must be in 1..10000"),
                          (["--dpi", "0"], "must be in 10..1200")):
        with pytest.raises(SystemExit) as exited:
            main(["--out", str(out), *flag])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and flag[0] in err and message in err, (flag, err)
    assert not out.exists()


def test_a_run_starts_from_given_weights_with_reset_set_or_kept_widths(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Incremental scaling: a run on one size starts from the weights of a network trained on
    another (a weights file, or a run's checkpoint: its optimiser's mean), PGPE's widths its
    own sigma_0, a given one, or the checkpoint's optimiser's; the weights name the cell."""
    import pickle

    from flows.capture_train import main
    from services.policy_search.runs import network_for, start_point

    small = RunSpec("mdrnn", 5, "pgpe", run=2, evaluations=12, games=2, final_games=2)
    trained = run(small, tmp_path / "small.pkl")
    flat = tmp_path / "small.npy"
    np.save(flat, trained.mean)
    from_file = RunSpec("mdrnn", 7, "pgpe", evaluations=2, games=2, final_games=2,
                        init=str(flat))
    assert np.array_equal(start_point(from_file, network_for(from_file)), trained.mean)
    # PGPE's first generation only sets its baseline: the mean network is still the start
    up = run(from_file, tmp_path / "up.pkl")
    assert np.array_equal(up.mean, trained.mean)
    assert np.all(load_state(tmp_path / "up.pkl")["optimiser"].sigma == 2.0)  # the paper's
    plain = RunSpec("mdrnn", 7, "pgpe", evaluations=2, games=2, final_games=2)
    assert from_file.cell.startswith(plain.cell + "-from") and from_file.cell != plain.cell
    # a set width, and the widths the checkpoint's PGPE ended with
    narrow = RunSpec("mdrnn", 7, "pgpe", evaluations=2, games=2, final_games=2,
                     init=str(flat), init_sigma=0.5)
    run(narrow, tmp_path / "narrow.pkl")
    assert np.all(load_state(tmp_path / "narrow.pkl")["optimiser"].sigma == 0.5)
    state = load_state(tmp_path / "small.pkl")  # widths of its own, as a longer run has
    state["optimiser"].sigma = np.random.default_rng(0).uniform(0.1, 1.0, 12)
    (tmp_path / "ended.pkl").write_bytes(pickle.dumps(state))
    kept = RunSpec("mdrnn", 7, "pgpe", evaluations=2, games=2, final_games=2,
                   init=str(tmp_path / "ended.pkl"), keep_sigma=True)
    run(kept, tmp_path / "kept.pkl")
    ended, began = state["optimiser"], load_state(tmp_path / "kept.pkl")["optimiser"]
    assert np.array_equal(began.sigma, ended.sigma) and np.array_equal(began.mean, ended.mean)
    assert len({narrow.cell, kept.cell, from_file.cell}) == 3
    # what cannot start a run is refused before a game is played, naming the file
    other = tmp_path / "other.npy"
    np.save(other, np.zeros(7))
    with pytest.raises(ValueError, match=r"other\.npy: 7 weights, the network has 12"):
        RunSpec("mdrnn", 7, "pgpe", init=str(other))
    with pytest.raises(ValueError, match="no optimiser's widths"):
        RunSpec("mdrnn", 7, "pgpe", init=str(flat), keep_sigma=True)
    with pytest.raises(ValueError, match="keep_sigma needs"):
        RunSpec("mdrnn", 7, "pgpe", keep_sigma=True)
    # and on the command line, usage errors
    for flags, message in ((["--init-sigma", "0.5"], "go with --init"),
                           (["--init", str(other)], "7 weights"),
                           (["--init", str(tmp_path / "missing.pt")], "no such file")):
        with pytest.raises(SystemExit) as exited:
            main(["--out", str(tmp_path / "grid"), "--networks", "mdrnn", *flags])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and message in err, (flags, err)
    assert not (tmp_path / "grid").exists()
