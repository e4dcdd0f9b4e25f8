"""The policy-search optimisers on cheap functions with known answers (the ask/tell contract,
PGPE's update rule, the ES's selection, the CMA-ES adapter), and the Capture Game fitness:
one candidate's games are `play_games`' games, and PGPE on a 5x5 MDRNN learns to beat the
greedy player more often."""

from __future__ import annotations

import pickle
from functools import partial

import numpy as np
import pytest
import torch

from services.games.capture.batch import play_games
from services.models.mdrnn import MDLSTM, MDRNN
from services.policy_search.cmaes import CMAES
from services.policy_search.es import MuCommaLambdaES
from services.policy_search.fitness import (
    GAMES,
    network_policy,
    planes,
    population_fitness,
)
from services.policy_search.handoff import Handoff
from services.policy_search.pgpe import PGPE
from services.policy_search.scout import Scouted


def _pgpe_after(first: CMAES, seed: int) -> PGPE:
    return PGPE(first.mean, sigma0=first.stds, pairs=5, seed=seed)


OPTIMISERS = {
    "pgpe": lambda x0, seed: PGPE(x0, pairs=5, seed=seed),
    "scouted-pgpe": lambda x0, seed: Scouted(x0, partial(PGPE, pairs=5, seed=seed), samples=40,
                                             shortlist=4, repeats=5, batch=20, seed=seed),
    "cmaes-then-pgpe": lambda x0, seed: Handoff(CMAES(x0, seed=seed), 40,
                                                partial(_pgpe_after, seed=seed)),
    "es": lambda x0, seed: MuCommaLambdaES(x0, seed=seed),
    "cmaes": lambda x0, seed: CMAES(x0, seed=seed),
}


def _noisy_sphere(x: np.ndarray, rng: np.random.Generator, centre: np.ndarray) -> np.ndarray:
    return -((x - centre) ** 2).sum(1) + rng.normal(0, 0.1, len(x))


@pytest.mark.parametrize("name", sorted(OPTIMISERS))
def test_each_optimiser_approaches_a_noisy_spheres_centre(name: str) -> None:
    centre = np.full(10, 2.0)
    opt = OPTIMISERS[name](np.zeros(10), 0)
    rng = np.random.default_rng(1)
    start = ((opt.mean - centre) ** 2).sum()
    while opt.evaluations < 600:
        opt.tell(_noisy_sphere(opt.ask(), rng, centre))
    assert ((opt.mean - centre) ** 2).sum() < 0.25 * start
    assert opt.best_fitness > -start


@pytest.mark.parametrize("name", sorted(OPTIMISERS))
def test_ask_tell_contract_and_seeding(name: str) -> None:
    a, b, c = (OPTIMISERS[name](np.zeros(4), seed) for seed in (3, 3, 4))
    pa, pb, pc = a.ask(), b.ask(), c.ask()
    assert pa.shape[1] == 4 and pa.dtype == np.float64
    np.testing.assert_array_equal(pa, pb)
    assert not np.array_equal(pa, pc)
    with pytest.raises(RuntimeError, match="tell"):
        a.ask()
    with pytest.raises(ValueError, match="fitnesses told"):
        a.tell(np.zeros(len(pa) + 1))
    with pytest.raises(ValueError, match="finite"):
        a.tell(np.full(len(pa), np.nan))
    a.tell(-(pa ** 2).sum(1))
    assert a.evaluations == len(pa)
    np.testing.assert_array_equal(a.best_x, pa[np.argmax(-(pa ** 2).sum(1))])
    with pytest.raises(RuntimeError, match="without ask"):
        a.tell(np.zeros(len(pa)))


def test_pgpe_samples_symmetric_pairs_around_the_mean() -> None:
    opt = PGPE(np.arange(6.0), pairs=3, seed=0)
    pop = opt.ask()
    assert pop.shape == (6, 6)
    np.testing.assert_allclose((pop[0::2] + pop[1::2]) / 2, np.tile(opt.mean, (3, 1)))
    eps = (pop[0::2] - pop[1::2]) / 2
    assert not np.allclose(eps[0], eps[1])


def test_pgpe_update_is_the_normalised_symmetric_rule() -> None:
    """Hand-computed steps (alpha_mu 0.2, alpha_sigma 0.1): the first generation sets the
    baseline; then mu moves by 0.2 (r+ - r-) / (2m - r+ - r-) eps, and sigma only where the
    pair's mean beats the baseline."""
    opt = PGPE(np.zeros(3), sigma0=2.0, seed=0)
    opt.ask()
    opt.tell(np.array([1.0, 0.0]))  # baseline 0.5, best m = 1; no step
    np.testing.assert_array_equal(opt.mean, np.zeros(3))
    assert opt.baseline == 0.5
    pop = opt.ask()
    eps = (pop[0] - pop[1]) / 2
    opt.tell(np.array([0.5, -0.5]))  # mean 0 < baseline: sigma unchanged
    np.testing.assert_allclose(opt.mean, 0.2 * (1.0 / 2.0) * eps)
    np.testing.assert_array_equal(opt.sigma, np.full(3, 2.0))
    assert opt.baseline == pytest.approx(0.45)
    mu, pop = opt.mean, opt.ask()
    eps = (pop[0] - pop[1]) / 2
    opt.tell(np.array([0.9, 0.7]))  # mean 0.8 > baseline 0.45
    np.testing.assert_allclose(opt.mean, mu + 0.2 * (0.2 / 0.4) * eps)
    step = (0.8 - 0.45) / (1.0 - 0.45)
    np.testing.assert_allclose(opt.sigma, 2.0 + 0.1 * step * (eps ** 2 - 4.0) / 2.0)


def _pair_step(opt: PGPE, fitness: list[float]) -> np.ndarray:
    """Ask one pair, tell `fitness`, return eps (the pair's half difference)."""
    pop = opt.ask()
    opt.tell(np.array(fitness))
    return (pop[0] - pop[1]) / 2


def test_pgpe_memory_forgets_an_early_lucky_best() -> None:
    """One lucky candidate (0.9) early: with the paper's m (the best ever) a later pair at the
    floor, (-0.95, -1), moves the mean by 0.05 / 3.75 of a step; with `memory` 3, three
    generations later m is that pair's own best and the step is the full alpha_mu eps."""
    paper, recent = PGPE(np.zeros(3), seed=0), PGPE(np.zeros(3), seed=0, memory=3)
    for opt in (paper, recent):
        _pair_step(opt, [-1.0, -1.0])  # the baseline
        _pair_step(opt, [0.9, -1.0])  # the lucky one
        for _ in range(3):
            _pair_step(opt, [-1.0, -1.0])  # no step either way
    mu_paper, mu_recent = paper.mean, recent.mean
    eps = _pair_step(paper, [-0.95, -1.0])
    assert np.array_equal(eps, _pair_step(recent, [-0.95, -1.0]))  # same seed, same samples
    np.testing.assert_allclose(paper.mean - mu_paper, 0.2 * (0.05 / 3.75) * eps)
    np.testing.assert_allclose(recent.mean - mu_recent, 0.2 * eps)
    assert paper.best_fitness == recent.best_fitness == 0.9  # the best seen is still kept


def test_pgpe_memory_keeps_m_at_or_above_the_pair_and_sigma_off_below_the_baseline() -> None:
    """With a memory of one generation m is the pair's own best: the better member's step
    is the whole alpha_mu eps, and a pair below the baseline never moves sigma (m - b < 0
    there would flip the sign of the sigma rule)."""
    opt = PGPE(np.zeros(2), seed=4, memory=1)
    _pair_step(opt, [0.5, 0.5])  # baseline 0.5
    mu = opt.mean
    eps = _pair_step(opt, [-0.2, -0.6])  # m = -0.2 < baseline 0.5
    np.testing.assert_allclose(opt.mean - mu, 0.2 * (0.4 / 0.4) * eps)
    np.testing.assert_array_equal(opt.sigma, np.full(2, 2.0))
    with pytest.raises(ValueError, match="memory"):
        PGPE(np.zeros(2), memory=0)


def test_a_pgpe_pickled_before_memory_existed_reads_back_with_the_papers_m() -> None:
    opt = PGPE(np.zeros(3), seed=2)
    _pair_step(opt, [-1.0, -1.0])
    _pair_step(opt, [0.9, -1.0])
    state = dict(opt.__dict__)
    for name in ("memory", "_recent_best"):
        del state[name]
    old = PGPE.__new__(PGPE)
    old.__setstate__(state)
    assert old.memory is None
    mu = old.mean
    eps = _pair_step(old, [-0.95, -1.0])
    np.testing.assert_allclose(old.mean - mu, 0.2 * (0.05 / 3.75) * eps)


def test_pgpe_pairs_steps_add_up() -> None:
    opt = PGPE(np.zeros(2), pairs=2, seed=1)
    opt.ask()
    opt.tell(np.array([1.0, 0.0, 0.0, 0.0]))  # baseline 0.25, best 1
    pop = opt.ask()
    eps = (pop[0::2] - pop[1::2]) / 2
    opt.tell(np.array([0.5, 0.0, 0.0, 0.5]))  # pair means 0.25: no sigma step
    expected = 0.2 * (0.5 / 1.5) * eps[0] + 0.2 * (-0.5 / 1.5) * eps[1]
    np.testing.assert_allclose(opt.mean, expected)
    np.testing.assert_array_equal(opt.sigma, np.full(2, 2.0))


def test_pgpe_steps_along_a_linear_functions_gradient() -> None:
    slope = np.array([1.0, -2.0, 0.5, 3.0])
    opt = PGPE(np.zeros(4), seed=2)
    for _ in range(200):
        before = opt.mean
        opt.tell(opt.ask() @ slope)
        assert (opt.mean - before) @ slope >= 0  # every step climbs (or stays)
    assert np.array_equal(np.sign(opt.mean), np.sign(slope))
    assert opt.mean @ slope > 50
    # averaged over many symmetric pairs, one step is along the gradient: for a linear
    # fitness the normalisation is the same for every pair, and E[(slope . eps) eps] is
    # sigma^2 slope with equal sigmas
    many = PGPE(np.zeros(4), pairs=4000, seed=3)
    many.tell(many.ask() @ slope)  # sets the baseline
    many.tell(many.ask() @ slope)
    step = many.mean / np.linalg.norm(many.mean)
    assert step @ (slope / np.linalg.norm(slope)) > 0.99


def test_es_keeps_the_mu_best_of_lambda_offspring() -> None:
    opt = MuCommaLambdaES(np.zeros(3), sigma0=0.5, seed=1)
    assert (opt.mu, opt.lam) == (5, 30)
    for _ in range(4):
        pop = opt.ask()
        assert pop.shape == (30, 3)
        fitness = -np.abs(pop).sum(1)
        opt.tell(fitness)
        best = pop[np.argsort(-fitness)[:5]]
        np.testing.assert_array_equal(opt.parents, best)  # comma: old parents are gone
        np.testing.assert_allclose(opt.mean, best.mean(0))
        assert opt.parent_sigmas.shape == (5, 3) and np.all(opt.parent_sigmas > 0)


def test_es_step_sizes_shrink_near_an_optimum() -> None:
    opt = MuCommaLambdaES(np.full(5, 0.1), sigma0=1.0, seed=0)
    for _ in range(40):
        pop = opt.ask()
        opt.tell(-(pop ** 2).sum(1))
    assert np.median(opt.parent_sigmas) < 0.1


def test_cmaes_adapter_counts_evaluations_and_maximises() -> None:
    opt = CMAES(np.zeros(6), sigma0=0.5, seed=0)
    assert opt.popsize == 4 + int(3 * np.log(6))
    for generation in range(1, 6):
        pop = opt.ask()
        assert pop.shape == (opt.popsize, 6)
        opt.tell(pop.sum(1))  # a linear fitness: the mean must move along +1
        assert opt.evaluations == generation * opt.popsize == opt.es.countevals
    assert opt.mean.sum() > 0
    assert CMAES(np.zeros(6), popsize=20, seed=0).ask().shape == (20, 6)


def _tell_constant(opt: CMAES, fitness: float, generations: int) -> None:
    for _ in range(generations):
        pop = opt.ask()
        opt.tell(np.full(len(pop), fitness))


def test_cmaes_restarts_a_stagnating_search_with_twice_the_population() -> None:
    opt = CMAES(np.zeros(6), seed=0, restarts=True)
    lam, w = opt.popsize, opt.window
    assert w == max(10, int(np.ceil(600 / lam)))
    _tell_constant(opt, 0.5, 2 * w - 1)  # one window short of two: no verdict yet
    assert opt.restarts_done == 0 and opt.popsize == lam
    _tell_constant(opt, 0.5, 1)  # two flat windows: stagnated
    assert opt.restarts_done == 1 and opt.popsize == 2 * lam
    kept = opt.mean  # the finished search's mean, while the new one has no window yet
    assert not np.allclose(kept, opt.es.mean)  # the new search starts from a fresh point
    # a worse new search never replaces it ...
    _tell_constant(opt, -0.5, opt.window)
    assert np.array_equal(opt.mean, kept)
    # ... a better one does, once its last window beats the kept one's 0.5
    _tell_constant(opt, 0.9, opt.window)
    assert np.allclose(opt.mean, opt.es.mean) and opt.restarts_done == 1


def test_cmaes_keeps_searching_while_the_population_improves() -> None:
    opt = CMAES(np.zeros(6), seed=0, restarts=True)
    w = opt.window
    for g in range(4 * w):  # +0.01 a generation: far more than MIN_GAIN a window
        pop = opt.ask()
        opt.tell(np.full(len(pop), -1.0 + 0.01 * g))
    assert opt.restarts_done == 0
    plain = CMAES(np.zeros(6), seed=0)
    _tell_constant(plain, 0.0, 4 * w)
    assert plain.restarts_done == 0  # without restarts, a flat search goes on


def test_a_restarting_cmaes_resumes_from_a_pickle_as_it_would_have_gone_on() -> None:
    import cloudpickle

    def drive(opt: CMAES, generations: int, start: int) -> list[np.ndarray]:
        asked = []
        for g in range(start, start + generations):
            pop = opt.ask()
            asked.append(pop)
            opt.tell(np.full(len(pop), 0.3 if g < 100 else -0.2))
        return asked

    a = CMAES(np.zeros(5), seed=3, restarts=True)
    b = CMAES(np.zeros(5), seed=3, restarts=True)
    first = drive(a, 70, 0)
    drive(b, 70, 0)
    b = pickle.loads(cloudpickle.dumps(b))
    rest_a, rest_b = drive(a, 90, 70), drive(b, 90, 70)
    assert a.restarts_done >= 1 and a.restarts_done == b.restarts_done
    assert all(np.array_equal(x, y) for x, y in zip(rest_a, rest_b, strict=True))
    assert np.array_equal(a.mean, b.mean) and len(first) == 70


def test_a_cmaes_pickled_before_restarts_existed_reads_back_as_a_plain_search() -> None:
    opt = CMAES(np.zeros(4), seed=1)
    _tell_constant(opt, 0.0, 3)
    state = dict(opt.__dict__)
    for name in ("restarts", "min_gain", "restarts_done", "_averages", "_kept", "sigma0",
                 "_normals"):
        del state[name]
    old = CMAES.__new__(CMAES)
    old.__setstate__(state)
    assert not old.restarts and old.restarts_done == 0
    assert np.array_equal(old.mean, opt.mean)
    _tell_constant(old, 0.0, 2)  # and it goes on asking and telling
    assert old.evaluations == 5 * opt.popsize


def test_a_weakened_opponent_loses_more_and_a_share_of_0_changes_nothing() -> None:
    from services.policy_search.fitness import generation_fitness

    net = MDLSTM(2, seed=0)
    population = np.random.default_rng(4).standard_normal((6, net.n_weights()))

    def fitness(share: float | None, seed: int = 9) -> np.ndarray:
        shares = None if share is None else [share]
        return generation_fitness(net, [population], 5, [np.random.default_rng(seed)], [40],
                                  random_share=shares)[0].greedy

    plain = fitness(None)
    assert np.array_equal(fitness(0.0), plain)  # no draw, the same games
    random_opponent = fitness(1.0)
    assert random_opponent.mean() > plain.mean() + 0.3  # random moves lose far more often
    assert np.array_equal(fitness(0.5), fitness(0.5))  # reproducible from the generator
    with pytest.raises(ValueError, match="random_share"):
        fitness(1.5)


def test_planes_are_seen_from_the_side_to_move() -> None:
    boards = np.array([[[1, 2], [0, 1]], [[1, 2], [0, 1]]], np.int8)
    x = planes(boards, np.array([1, 2], np.int8))
    assert x.shape == (2, 2, 2, 2)
    assert torch.equal(x[0, 0], torch.tensor([[1.0, 0], [0, 1]]))  # black's own stones
    assert torch.equal(x[0, 1], torch.tensor([[0.0, 1], [0, 0]]))
    assert torch.equal(x[1, 0], x[0, 1]) and torch.equal(x[1, 1], x[0, 0])


@pytest.mark.parametrize("cls", [MDRNN, MDLSTM])
def test_a_candidates_fitness_is_its_play_games_result(cls) -> None:
    """A population of one plays exactly `play_games`' 40 games (same generator, same tie
    breaks), and the population's candidates are independent of each other's games."""
    net = cls(2)
    candidates = [cls(2, seed=s).get_flat().numpy() for s in range(6)]
    population = np.stack(candidates)
    together = population_fitness(net, population, 5, np.random.default_rng(11))
    rng = np.random.default_rng(11)
    for i, flat in enumerate(candidates):
        alone = cls(2)
        alone.set_flat(torch.from_numpy(flat))
        expected = play_games(network_policy(alone), GAMES, 5, rng).fitness
        assert together[i] == pytest.approx(expected)
    assert np.all((together >= -1) & (together <= 1))
    assert len(set(together.tolist())) > 1  # the candidates differ, so does their play


def _train(opt, net, generations: int, seed: int) -> list[float]:
    """The training loop a run does: ask, play every candidate's games, tell. Returns the
    generations' mean fitnesses."""
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(generations):
        population = opt.ask()
        fitness = population_fitness(net, population, 5, rng)
        opt.tell(fitness)
        means.append(float(fitness.mean()))
    return means


def test_es_on_a_5x5_mdrnn_learns_to_beat_the_greedy_player_more_often() -> None:
    """25 generations of the (5, 30)-ES from all-zero weights (750 evaluations, 30,000 games):
    the generations' mean fitness rises, and so does the mean network's over 400 games.
    (Seeds 0-5 all pass both checks with room: the last generations' mean 0.09-0.35 above
    the first's, the mean network from -1.0 to -0.755 or better.)"""
    net = MDRNN(2)
    opt = MuCommaLambdaES(np.zeros(net.n_weights()), seed=0)
    start = population_fitness(net, opt.mean[None], 5, np.random.default_rng(100), games=400)[0]
    means = _train(opt, net, 25, seed=0)
    assert opt.evaluations == 25 * 30
    assert np.mean(means[-3:]) > np.mean(means[:3]) + 0.05
    end = population_fitness(net, opt.mean[None], 5, np.random.default_rng(100), games=400)[0]
    assert end > start + 0.15


def test_pgpe_on_a_5x5_mdrnn_moves_only_on_pairs_that_played_differently() -> None:
    """PGPE's whole loop on real games (the paper's rule and rates, 10 pairs a generation):
    the mean moves exactly when some pair's two candidates scored differently, and every
    fitness is a mean of 40 +-1 outcomes."""
    net = MDRNN(2)
    opt = PGPE(np.zeros(net.n_weights()), pairs=10, seed=1)
    rng = np.random.default_rng(1)
    moved = 0
    for generation in range(6):
        before = opt.mean
        population = opt.ask()
        fitness = population_fitness(net, population, 5, rng)
        assert np.all(np.isin(np.round(fitness * GAMES / 2 + GAMES / 2), np.arange(GAMES + 1)))
        opt.tell(fitness)
        differ = generation > 0 and bool(np.any(fitness[0::2] != fitness[1::2]))
        assert (not np.array_equal(opt.mean, before)) == differ
        moved += differ
    assert moved > 0
    assert opt.evaluations == 6 * 20


@pytest.mark.parametrize("name", sorted(OPTIMISERS))
def test_an_optimiser_pickled_mid_run_goes_on_as_the_original(name: str) -> None:
    """A checkpoint is the pickled optimiser: restored, it asks what the original asks."""
    opt = OPTIMISERS[name](np.zeros(5), 7)
    for _ in range(3):
        pop = opt.ask()
        opt.tell(-(pop ** 2).sum(1))
    restored = pickle.loads(pickle.dumps(opt))
    for _ in range(2):
        a, b = opt.ask(), restored.ask()
        np.testing.assert_array_equal(a, b)
        opt.tell(-(a ** 2).sum(1))
        restored.tell(-(b ** 2).sum(1))
    np.testing.assert_array_equal(opt.mean, restored.mean)
    assert opt.evaluations == restored.evaluations


def test_scouting_draws_around_x0_confirms_its_shortlist_and_starts_the_optimiser_there(
) -> None:
    """Draws N(x0, sigma^2) in batches; the shortlist (best by a single fitness) is played
    `repeats` times, and the optimiser starts from the draw with the best mean over the repeats,
    which need not be the best single draw (a lucky one); every evaluation counts."""
    x0 = np.full(3, 5.0)
    started: list[np.ndarray] = []

    def make_inner(start: np.ndarray) -> PGPE:
        started.append(start)
        return PGPE(start, pairs=1, seed=0)

    opt = Scouted(x0, make_inner, samples=25, shortlist=3, repeats=4, sigma=0.5, batch=10,
                  seed=1)
    np.testing.assert_array_equal(opt.mean, x0)
    draws = []
    for size in (10, 10, 5):
        assert opt.phase == "draws"
        pop = opt.ask()
        assert pop.shape == (size, 3)
        draws.append(pop)
        opt.tell(-np.abs(pop - x0).sum(1))  # nearest to x0 scores best
    draws = np.concatenate(draws)
    assert abs(draws.mean() - 5.0) < 0.3 and 0.3 < draws.std() < 0.7
    order = np.argsort(np.abs(draws - x0).sum(1))
    np.testing.assert_array_equal(opt.mean, draws[order[0]])  # the best draw until confirmed
    assert opt.phase == "confirmation"
    confirm = opt.ask()
    np.testing.assert_array_equal(confirm, np.repeat(draws[order[:3]], 4, axis=0))
    # the best single draw turns out worse on repeats than the third
    repeats = np.array([[-1.0] * 4, [-0.5] * 4, [0.0, 0.0, 0.0, -0.1]]).reshape(-1)
    opt.tell(repeats)
    assert opt.phase == "optimiser" and len(started) == 1
    np.testing.assert_array_equal(started[0], draws[order[2]])
    np.testing.assert_array_equal(opt.start, draws[order[2]])
    assert opt.start_fitness == pytest.approx(-0.025)
    np.testing.assert_array_equal(opt.mean, draws[order[2]])  # PGPE's mean starts there
    pair = opt.ask()
    assert pair.shape == (2, 3)
    opt.tell(np.array([0.5, -0.5]))
    assert opt.evaluations == 25 + 12 + 2
    assert opt.best_fitness == 0.5 and opt.inner.evaluations == 2
    for bad in ({"samples": 0}, {"shortlist": 26}, {"repeats": 0}, {"sigma": 0.0}):
        with pytest.raises(ValueError):
            Scouted(x0, make_inner, **{"samples": 25, **bad})


def test_a_handoff_starts_the_second_optimiser_at_the_firsts_mean_widths_and_best() -> None:
    """CMA-ES until its evaluations reach the hand-off (its last generation whole), then PGPE
    from CMA-ES's mean with sigma = CMA-ES's sigma * sqrt(diag C) per parameter and the run's
    best fitness so far (PGPE's reward normalisation needs it)."""
    rng = np.random.default_rng(0)
    centre = np.arange(4.0)
    first = CMAES(np.zeros(4), sigma0=0.5, seed=2)
    opt = Handoff(first, 20, partial(_pgpe_after, seed=3))
    told = 0
    while opt.second is None:
        population = opt.ask()
        assert population.shape == (first.popsize, 4)
        widths_before = first.stds
        opt.tell(_noisy_sphere(population, rng, centre))
        told += first.popsize
    assert told >= 20 > told - first.popsize and opt.handed_off_at == told == opt.evaluations
    second = opt.second
    assert isinstance(second, PGPE)
    np.testing.assert_array_equal(second.mean, first.mean)
    np.testing.assert_array_equal(second.sigma, first.stds)
    assert not np.array_equal(first.stds, widths_before)  # the widths after the last generation
    assert second.best_fitness == opt.best_fitness and second.evaluations == 0
    pair = opt.ask()
    assert pair.shape == (10, 4)
    opt.tell(-((pair - centre) ** 2).sum(1))
    assert first.evaluations == told and second.evaluations == 10
    assert opt.evaluations == told + 10
    np.testing.assert_array_equal(opt.mean, second.mean)
    with pytest.raises(ValueError, match="episodes"):
        Handoff(CMAES(np.zeros(4)), 0, partial(_pgpe_after, seed=0))
    # PGPE takes one sigma per parameter; none may be <= 0
    np.testing.assert_array_equal(PGPE(np.zeros(3), sigma0=np.array([1.0, 2, 3])).sigma,
                                  [1.0, 2, 3])
    with pytest.raises(ValueError, match="sigma0"):
        PGPE(np.zeros(3), sigma0=np.array([1.0, 0, 3]))


def test_a_candidate_against_itself_scores_zero_and_versus_games_match_play_matches() -> None:
    """Co-evolution's games: two per opponent network, one per colour. A network against
    itself plays the same game twice with the colours swapped, so its mean outcome is 0; the
    outcomes are the ones `play_matches` gives for the same pairings; the fitness against the
    greedy player is unchanged by the extra games in the batch."""
    from services.policy_search.fitness import GREEDY, generation_fitness, play_matches

    net = MDLSTM(2)
    rng = np.random.default_rng(3)
    population = rng.standard_normal((3, net.n_weights()))
    opponents = np.stack([population[0], rng.standard_normal(net.n_weights())])
    (greedy, versus, shaped), (alone, none, _) = generation_fitness(
        net, [population, population[:1]], 5, [np.random.default_rng(7),
                                               np.random.default_rng(8)], [6, 4],
        [opponents, None])
    assert none is None and shaped is None and versus.shape == (3,)
    assert versus[0] == (0.0 + play_matches(net, opponents, [0], [1], 5, np.zeros((25, 1)))[0]
                         - play_matches(net, opponents, [1], [0], 5, np.zeros((25, 1)))[0]) / 4
    table = np.concatenate([population, opponents])
    for i in range(3):
        won = play_matches(net, table, [i, i, 3, 4], [3, 4, i, i], 5, np.zeros((25, 4)))
        assert versus[i] == np.concatenate([won[:2], -won[2:]]).mean()
    assert np.array_equal(greedy, population_fitness(net, population, 5,
                                                     np.random.default_rng(7), games=6))
    assert np.array_equal(alone, population_fitness(net, population[:1], 5,
                                                    np.random.default_rng(8), games=4))
    # both sides greedy: the engine's greedy player against itself, black wins or loses
    assert set(play_matches(net, table, [GREEDY] * 4, [GREEDY] * 4, 5,
                            rng.random((25, 4)))) <= {-1, 1}


def test_shaped_outcomes_rank_by_length_and_keep_every_win_above_every_loss() -> None:
    from services.policy_search.fitness import shaped_outcomes

    outcomes = np.array([-1, -1, 1, 1])
    plies = np.array([4, 20, 5, 25])
    shaped = shaped_outcomes(outcomes, plies, 5, 0.5)
    np.testing.assert_allclose(shaped, [-1 + 0.5 * 4 / 25, -1 + 0.5 * 20 / 25,
                                        1 - 0.5 * 5 / 25, 1 - 0.5 * 25 / 25])
    assert shaped[1] > shaped[0]  # the later loss counts more
    assert shaped[2] > shaped[3]  # the sooner win counts more
    worst_win = shaped_outcomes(np.array([1]), np.array([25]), 5, 0.99)[0]
    best_loss = shaped_outcomes(np.array([-1]), np.array([25]), 5, 0.99)[0]
    assert worst_win > best_loss
    np.testing.assert_array_equal(shaped_outcomes(outcomes, plies, 5, 0.0), outcomes)
    # losses only: a win is +1 whatever its length, a loss as before
    np.testing.assert_allclose(shaped_outcomes(outcomes, plies, 5, 0.5, wins=False),
                               [shaped[0], shaped[1], 1.0, 1.0])


def test_generation_fitness_shapes_each_populations_own_games() -> None:
    """With shaping, a population's shaped fitness is the mean `shaped_outcomes` of exactly
    the games `play_matches_timed` plays for its candidates; its plain fitness is the one it
    gets without shaping, and a population without shaping in the same batch gets none."""
    from services.games.capture.batch import BLACK, network_colours, tie_uniforms
    from services.policy_search.fitness import (
        GREEDY,
        generation_fitness,
        play_matches_timed,
        shaped_outcomes,
    )

    net = MDRNN(2)
    rng = np.random.default_rng(11)
    population = rng.standard_normal((4, net.n_weights()))
    other = rng.standard_normal((2, net.n_weights()))
    parts = generation_fitness(net, [population, other], 5, [np.random.default_rng(1),
                                                            np.random.default_rng(2)],
                               [6, 6], shaping=[0.5, 0.0])
    plain = generation_fitness(net, [population, other], 5, [np.random.default_rng(1),
                                                            np.random.default_rng(2)], [6, 6])
    spared = generation_fitness(net, [population], 5, [np.random.default_rng(1)], [6],
                                shaping=[0.5], shaping_wins=[False])[0]
    np.testing.assert_array_equal(parts[0].greedy, plain[0].greedy)
    assert parts[1].shaped is None and plain[0].shaped is None
    games_rng = np.random.default_rng(1)
    colours = network_colours(6)
    for i in range(4):
        black = np.where(colours == BLACK, 0, GREEDY)
        white = np.where(colours == BLACK, GREEDY, 0)
        won, plies = play_matches_timed(net, population[i:i + 1], black, white, 5,
                                        tie_uniforms(games_rng, 5, 6))
        outcome = np.where(colours == BLACK, won, -won)
        assert parts[0].greedy[i] == outcome.mean()
        assert parts[0].shaped[i] == pytest.approx(
            shaped_outcomes(outcome, plies, 5, 0.5).mean())
        assert spared.shaped[i] == pytest.approx(
            shaped_outcomes(outcome, plies, 5, 0.5, wins=False).mean())
        assert ((plies >= 1) & (plies <= 25)).all()
    with pytest.raises(ValueError, match="shaping"):
        generation_fitness(net, [population], 5, [rng], [2], shaping=[1.0])


def test_shared_draws_give_a_group_the_same_opponent_and_leave_single_draws_unchanged() -> None:
    """With `shared` [2] the members of each pair meet the same tie-break numbers: two equal
    networks in a pair play the same games (equal length-shaped fitness, which tells games
    apart by their length); drawn one per candidate, they do not. The first member of each
    pair meets the draws a population of the first members alone would."""
    from services.policy_search.fitness import generation_fitness

    net = MDRNN(2)
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((2, net.n_weights()))
    population = np.stack([x, x, y, y])

    def shaped(pop: np.ndarray, shared: list[int] | None) -> np.ndarray:
        return generation_fitness(net, [pop], 5, [np.random.default_rng(3)], [12],
                                  shaping=[0.5], shared=shared)[0].shaped

    paired, single = shaped(population, [2]), shaped(population, None)
    assert paired[0] == paired[1] and paired[2] == paired[3]
    assert single[0] != single[1] or single[2] != single[3]
    np.testing.assert_array_equal(paired[0::2], shaped(population[0::2], [1]))
    np.testing.assert_array_equal(single, shaped(population, [1]))
    with pytest.raises(ValueError, match="shared"):
        shaped(population[:3], [2])
