"""Match engines whose leaf values mix in fast rollouts, and the rollout policy published with
its network (`python -m services.trainer.publish --rollout`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from services.games.registry import get_game
from services.games.rollout import RolloutWeights
from services.match.engines import SearchEngine
from services.match.specs import EngineSpecError, open_engine, parse_engine, resolve
from services.repository.publish import publish
from services.repository.rollout_policy import ROLLOUT_FILE, read_rollout
from services.trainer import publish as publish_command
from tests.match_nets import UniformNet, publish_net, save

torch.set_num_threads(1)
GOMOKU = get_game("gomoku")


def _weights(config: str = "rollout_k5") -> RolloutWeights:
    kernel = np.zeros((3, 5, 5), np.float32)
    kernel[0, 2, 1] = kernel[0, 2, 3] = 1.0  # next to an own stone
    return RolloutWeights(kernel, 0.0, config=config)


class CountingSource:
    """A rollout source that counts the calls asking it for weights."""

    def __init__(self, weights: RolloutWeights) -> None:
        self.weights = weights
        self.calls = 0

    def weights_for(self, model_name: str, model_version: str) -> RolloutWeights:
        self.calls += 1
        return self.weights


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """v1: the uniform network with a rollout policy; v2: the same without one."""
    repository = tmp_path / "repo"
    path = save(UniformNet(), tmp_path / "uniform.pt")
    publish(path, repository, "gomoku_policy", validate=False, game="gomoku",
            source="uniform", rollout=_weights())
    publish_net(UniformNet(), repository, tmp_path / "nets")
    return repository


def test_rollout_lambda_is_a_checked_option_of_a_version_engine(repo: Path) -> None:
    assert parse_engine("version:1:rollout_lambda=0.5").lambda_option() == 0.5
    for bad in ("version:1:rollout_lambda=1.5", "version:1:rollout_lambda=-0.1",
                "version:1:rollout_lambda=nan", "version:1:rollout_lambda=half"):
        with pytest.raises(EngineSpecError, match="rollout_lambda must be a number in"):
            parse_engine(bad)
    with pytest.raises(EngineSpecError, match="takes no option 'rollout_lambda'"):
        parse_engine("policy:1:rollout_lambda=0.5")
    with pytest.raises(EngineSpecError, match=r"version 2 has no rollout policy.*--rollout"):
        resolve("version:2:visits=8:rollout_lambda=0.5", GOMOKU, repo)
    player = resolve("version:1:visits=8:rollout_lambda=0.50", GOMOKU, repo)
    assert player.label == "version:gomoku_policy/1:visits=8:rollout_lambda=0.5"
    assert player.rollout_file is not None and Path(player.rollout_file).name == ROLLOUT_FILE
    plain = resolve("version:1:visits=8:rollout_lambda=0", GOMOKU, repo)
    assert plain.label == "version:gomoku_policy/1:visits=8" and plain.rollout_file is None


def test_a_rollout_engine_plays_rollouts_at_its_leaves_and_a_plain_one_none(repo: Path
                                                                           ) -> None:
    state = GOMOKU.start()
    for move in (112, 113, 97):
        state = state.play(move)
    mixed = open_engine(resolve("version:1:visits=16:rollout_lambda=0.5", GOMOKU, repo),
                        GOMOKU, seed=3)
    plain = open_engine(resolve("version:1:visits=16", GOMOKU, repo), GOMOKU)
    try:
        assert isinstance(mixed, SearchEngine) and mixed.rollout_lambda == 0.5
        counting = CountingSource(_weights())
        mixed.rollouts = counting
        move = mixed.genmove(state)
        assert move is not None and state.legal_mask()[move]
        assert counting.calls > 0  # every leaf batch asked for the rollout policy
        assert plain.rollouts is None and plain._evaluator(state) is plain.evaluator
    finally:
        mixed.close()
        plain.close()
    with pytest.raises(ValueError, match="needs a rollout policy"):
        SearchEngine(plain.evaluator, "x", visits=4, rollout_lambda=0.5)


def test_the_publish_command_versions_a_rollout_policy_with_its_network(tmp_path: Path,
                                                                       capsys) -> None:
    rollout = tmp_path / "rollout.npz"
    rollout.write_bytes(_weights().to_bytes())
    repository = tmp_path / "repo"
    assert publish_command.main(["--repository", str(repository), "--game", "gomoku",
                                 "--rollout", str(rollout)]) == 0
    stored = read_rollout(repository, GOMOKU.default_model, 1)
    assert stored is not None and stored.config == "rollout_k5"
    assert np.array_equal(stored.kernel, _weights().kernel)
    # another game's rollout policy, or a file that is none, is refused and publishes nothing
    rollout.write_bytes(_weights("go_rollout_k5").to_bytes())
    assert publish_command.main(["--repository", str(repository), "--game", "gomoku",
                                 "--rollout", str(rollout)]) == 1
    assert "is a go one" in capsys.readouterr().err
    rollout.write_bytes(b"not an npz")
    assert publish_command.main(["--repository", str(repository), "--game", "gomoku",
                                 "--rollout", str(rollout)]) == 1
    assert "not a rollout policy file" in capsys.readouterr().err
    assert read_rollout(repository, GOMOKU.default_model, 2) is None
