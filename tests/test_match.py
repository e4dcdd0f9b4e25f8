"""The match service: engines, the runner (colours, records, resumability), ratings, the gate
as a match, and `movepred match` / `movepred gate` argument errors.

Networks of known strength come from tests/match_nets.py (a line-building network against a
uniform one); games are Gomoku at a few visits, seconds each."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from services import cli
from services.games.registry import get_game
from services.match.engines import GomocupBrainEngine, PolicyEngine, SearchEngine
from services.match.gate import gate_by_match, stopping_verdict
from services.match.gtp_process import find_gnugo
from services.match.ratings import plot_ratings, rate, write_cards
from services.match.results import LOG_FILE, read_log, standings_table
from services.match.runner import RECORDS_DIR, MatchConfig, play_game, run_match, schedule
from services.match.specs import EngineSpecError, open_engine, parse_engine, resolve
from services.models.local_evaluator import LocalEvaluator
from services.ratings.sprt import Verdict, sprt
from services.repository.quarantine import quarantine, quarantine_reason
from services.repository.versions import list_versions, quarantined_versions, version_dir
from tests.match_nets import LineNet, UniformNet, publish_net, save, uniform_and_line_repo

torch.set_num_threads(1)
GOMOKU = get_game("gomoku")


@pytest.fixture()
def repo(tmp_path: Path) -> tuple[Path, int, int]:
    """A repository with v1 the uniform network and v2 the line network."""
    return uniform_and_line_repo(tmp_path)


def _players(repository: Path, *specs: str):
    return [resolve(s, GOMOKU, repository) for s in specs]


# ---------------------------------------------------------------------------- specs
def test_engine_specs_parse_and_resolve(repo) -> None:
    repository, _, lines = repo
    spec = parse_engine("version:gomoku_policy/2:visits=50:triton=127.0.0.1:8001:name=v2")
    assert (spec.kind, spec.target) == ("version", "gomoku_policy/2")
    assert spec.option("triton") == "127.0.0.1:8001" and spec.option("name") == "v2"
    assert parse_engine("gtp:cmd=prog --url=a:b -x").option("cmd") == "prog --url=a:b -x"
    player = resolve("version:latest", GOMOKU, repository)
    assert player.label == f"version:gomoku_policy/{lines}:visits=200"
    assert player.version == lines and Path(player.folder).is_dir()
    assert resolve("policy:1", GOMOKU, repository).label == "policy:gomoku_policy/1"
    for bad, words in [("foo:1", "unknown engine kind"), ("version", "name the version"),
                       ("version:3:visit=2", "takes no option 'visit'"),
                       ("version:3:visits=x", "not a whole number"),
                       ("gnugo:level=11", "level must be 0..10"),
                       ("gtp", "cmd=..."), ("gtp:cmd=", "cmd=...")]:
        with pytest.raises(EngineSpecError, match=words):
            parse_engine(bad)
    with pytest.raises(EngineSpecError, match="no published version 7"):
        resolve("version:7", GOMOKU, repository)
    with pytest.raises(EngineSpecError, match="not found"):
        resolve("gtp:cmd=/nonexistent/engine --mode gtp", GOMOKU, repository)


class CallCounter:
    """An evaluator that counts the network calls of the one it wraps."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.calls = 0

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def infer(self, boards, *args, **kwargs):
        self.calls += 1
        return self.inner.infer(boards, *args, **kwargs)


def test_batch_and_c_puct_options_set_a_version_engines_search(repo) -> None:
    repository, uniform, _ = repo
    assert parse_engine("version:1:batch=4").int_option("batch", 16, 1) == 4
    for bad, words in [("version:1:batch=0", "batch must be 1..1024"),
                       ("version:1:batch=four", "not a whole number"),
                       ("policy:1:batch=4", "takes no option 'batch'"),
                       ("version:1:c_puct=0", r"c_puct must be a number in \(0, 100\]"),
                       ("version:1:c_puct=nan", "c_puct must be"),
                       ("version:1:c_puct=high", "c_puct must be")]:
        with pytest.raises(EngineSpecError, match=words):
            parse_engine(bad)
    one = resolve(f"version:{uniform}:visits=32:batch=1", GOMOKU, repository)
    assert one.label == f"version:gomoku_policy/{uniform}:visits=32:batch=1"
    assert one.describe()["batch"] == 1 and one.describe()["c_puct"] == 1.5
    explore = resolve(f"version:{uniform}:visits=32:c_puct=2.50", GOMOKU, repository)
    assert explore.label == f"version:gomoku_policy/{uniform}:visits=32:c_puct=2.5"
    engine = open_engine(explore, GOMOKU)
    try:
        assert isinstance(engine, SearchEngine) and engine.c_puct == 2.5
    finally:
        engine.close()
    # the default batch is not spelt out: the same player as before the option existed
    default = resolve(f"version:{uniform}:visits=32:batch=16", GOMOKU, repository)
    assert default.label == f"version:gomoku_policy/{uniform}:visits=32"
    state = GOMOKU.start().play(112)
    calls = {}
    for player in (one, default):
        engine = open_engine(player, GOMOKU)
        try:
            assert isinstance(engine, SearchEngine)
            engine.evaluator = counter = CallCounter(engine.evaluator)
            assert state.legal_mask()[engine.genmove(state)]
            calls[engine.batch_size] = counter.calls
        finally:
            engine.close()
    # 32 visits one leaf a call: the root and 31 more calls; 16 leaves a call: a few
    assert calls[1] >= 30 and calls[16] <= 8, calls


# ---------------------------------------------------------------------------- engines
FAKE_BRAIN = textwrap.dedent("""
    import sys
    size, stones = 15, set()
    def move():
        for y in range(size):
            for x in range(size):
                if (x, y) not in stones:
                    stones.add((x, y))
                    print(f"{x},{y}", flush=True)
                    return
    lines = iter(sys.stdin)
    for line in lines:
        word, _, rest = line.strip().partition(" ")
        word = word.upper()
        if word == "START":
            size = int(rest); stones.clear(); print("OK", flush=True)
        elif word == "RESTART":
            stones.clear(); print("OK", flush=True)
        elif word == "BEGIN":
            print("MESSAGE thinking", flush=True); move()
        elif word == "TURN":
            x, y = map(int, rest.split(",")); stones.add((x, y)); move()
        elif word == "BOARD":
            stones.clear()
            for record in lines:
                if record.strip().upper() == "DONE":
                    break
                x, y, _ = map(int, record.split(",")); stones.add((x, y))
            move()
        elif word == "END":
            break
""")


def test_engines_play_legal_moves(tmp_path: Path) -> None:
    lines = LocalEvaluator(save(LineNet(), tmp_path / "lines.pt"), "lines")
    uniform = LocalEvaluator(save(UniformNet(), tmp_path / "uniform.pt"), "uniform")
    brain_script = tmp_path / "brain.py"
    brain_script.write_text(FAKE_BRAIN)
    brain = GomocupBrainEngine([sys.executable, str(brain_script)], "brain",
                               info={"timeout_turn": 100})
    engines = [PolicyEngine(lines, "policy"), SearchEngine(uniform, "search", visits=4), brain]
    try:
        for black in engines:
            for white in engines:
                if black is white:
                    continue
                for opening in [(), (112, 113, 97)]:
                    out = play_game(GOMOKU, black, white, opening, max_moves=30)
                    state = GOMOKU.start()
                    for move in out.moves:  # every move legal when played
                        assert state.legal_mask()[move]
                        state = state.play(move)
                    assert out.moves[:len(opening)] == opening
                    assert not out.end.startswith("illegal"), out.end
        # the brain's board follows a game it did not see from the start (BOARD, then TURN);
        # it plays the first free point from Piskvork's top left: a15 is point 210
        state = GOMOKU.start()
        for move in (210, 211, 212):
            state = state.play(move)
        assert brain.genmove(state) == 213 and brain.genmove(state.play(213).play(214)) == 215
    finally:
        brain.close()
    assert brain.process.proc.poll() is not None  # END ended it


def test_each_opening_twice_colours_swapped() -> None:
    plan = schedule(["a", "b", "c"], [(1,), (2,)])
    assert len(plan) == 2 * 3 * 2
    for opening in [(1,), (2,)]:
        games = {(p.black, p.white) for p in plan if p.opening == opening}
        assert games == {("a", "b"), ("b", "a"), ("a", "c"), ("c", "a"), ("b", "c"), ("c", "b")}
    with pytest.raises(ValueError, match="same name"):
        schedule(["a", "a"], [()])


# ---------------------------------------------------------------------------- runner
class Killed(Exception):
    pass


def test_killed_match_resumes_without_losing_or_repeating_a_game(repo, tmp_path: Path) -> None:
    repository, uniform, lines = repo
    players = _players(repository, f"policy:{lines}", f"version:{uniform}:visits=2")
    out = tmp_path / "match"
    config = MatchConfig(pairs=3, max_moves=60)

    def kill_after_three(entry: dict) -> None:
        if len(read_log(out / LOG_FILE)) == 3:
            raise Killed

    with pytest.raises(Killed):
        run_match(GOMOKU, players, out, config, on_game=kill_after_three)
    first = read_log(out / LOG_FILE)
    assert len(first) == 3
    with (out / LOG_FILE).open("a") as f:  # a line cut short by the kill
        f.write('{"format": 1, "id": "0002-half')
    (out / RECORDS_DIR / ".0002-x.sgf.123-abc.tmp").write_text("half")  # a record cut short
    seen: list[dict] = []
    report = run_match(GOMOKU, players, out, config, on_game=seen.append)
    assert report.skipped == 3 and report.played == 3 == len(seen)
    entries = read_log(out / LOG_FILE)
    assert len(entries) == 6 and entries[:3] == first
    assert len({(e["black"], e["white"], tuple(e["opening"])) for e in entries}) == 6
    records = sorted((out / RECORDS_DIR).iterdir())
    assert [p.name for p in records] == sorted(e["record"].split("/")[-1] for e in entries)
    assert all(p.suffix in GOMOKU.written_formats for p in records)
    again = run_match(GOMOKU, players, out, config)
    assert (again.played, again.skipped) == (0, 6)


# ---------------------------------------------------------------------------- ratings
def _entry(black: str, white: str, score: float, opening: int, players: dict) -> dict:
    return {"black": black, "white": white, "score": score, "opening": [opening],
            "players": players}


def test_ratings_log_gives_elo_with_intervals_plot_and_cards(repo, tmp_path: Path) -> None:
    repository, uniform, lines = repo
    a, b = f"version:gomoku_policy/{uniform}:visits=8", f"version:gomoku_policy/{lines}:visits=8"
    players = {a: {"kind": "version", "model_name": "gomoku_policy", "version": uniform,
                   "visits": 8},
               b: {"kind": "version", "model_name": "gomoku_policy", "version": lines,
                   "visits": 8},
               "gnugo:level=1": {"kind": "gnugo"}}
    entries = []
    for i in range(20):  # b beats a 3 games in 4; a and gnugo even
        entries.append(_entry(b if i % 2 else a, a if i % 2 else b,
                              float((i % 4 != 0) == bool(i % 2)), i, players))
        entries.append(_entry(a, "gnugo:level=1", 0.5, i, players))
    ratings = rate(entries, a)
    assert ratings[a].elo == 0 and ratings[b].elo > 50
    assert ratings[b].low < ratings[b].elo < ratings[b].high
    assert abs(ratings["gnugo:level=1"].elo) < 1e-6
    table = standings_table(ratings, entries, a)
    assert f"| {b} |" in table and "15-0-5" in table
    png = plot_ratings(ratings, entries, tmp_path / "elo.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    written = write_cards(repository, ratings, entries, tmp_path / LOG_FILE, a)
    assert sorted(written) == sorted([a, b])
    card = json.loads((version_dir(repository, "gomoku_policy", lines) / "metadata.json"
                       ).read_text())
    assert card["ratings"][b]["elo"] == pytest.approx(ratings[b].elo, abs=0.1)
    assert card["source"] == "LineNet"  # the rest of the card kept


# ---------------------------------------------------------------------------- the gate
def test_gate_passes_a_much_stronger_candidate(repo, tmp_path: Path) -> None:
    repository, uniform, lines = repo
    decision = gate_by_match(repository, GOMOKU, lines, visits=8, max_games=80,
                             out_dir=tmp_path / "gate")
    assert decision.passed and decision.verdict == "passed", decision.reason
    assert decision.serving_version == uniform and decision.wins > decision.losses
    assert decision.games < 80  # the SPRT stopped it
    assert lines in list_versions(repository, "gomoku_policy")
    card = json.loads((version_dir(repository, "gomoku_policy", lines) / "metadata.json"
                       ).read_text())
    assert card["match_gate"]["verdict"] == "passed" and card["source"] == "LineNet"
    assert len(read_log(tmp_path / "gate" / LOG_FILE)) == decision.games


def _games(results: str) -> list[dict]:
    """Log entries of the candidate "c" against "s", colours alternating: W a win, L a loss."""
    out = []
    for i, r in enumerate(results):
        black, white = ("c", "s") if i % 2 == 0 else ("s", "c")
        won_black = (r == "W") == (black == "c")
        out.append({"black": black, "white": white, "score": 1.0 if won_black else 0.0})
    return out


def test_the_gate_verdict_is_the_sprt_at_its_stopping_time() -> None:
    # 56 wins and 23 losses pass (LLR 2.95 >= 2.94); a game in flight when the test stopped
    # then finished as a loss: 56-0-24 is LLR 2.84, inside the bounds. The verdict stays the
    # pass, with the counts at the stop (over all 80 games the gate once reported "undecided
    # after the cap of 300 games" after 80)
    bounds = {"elo0": 0.0, "elo1": 35.0, "alpha": 0.05, "beta": 0.05, "max_games": 300}
    games = _games("WL" * 23 + "W" * 33 + "L")  # first out of the bounds at game 79
    assert sprt(56, 0, 24, **bounds).verdict == Verdict.CONTINUE
    result = stopping_verdict(games, "c", **bounds)
    assert result.verdict == Verdict.PASSED and (result.wins, result.losses) == (56, 23)
    # the same games in another order stop elsewhere: a sequential test's verdict is where
    # it first leaves the bounds, in the order the games finished
    early = stopping_verdict(_games("W" * 33 + "WL" * 23 + "L"), "c", **bounds)
    assert early.verdict == Verdict.PASSED and early.wins + early.losses < 79
    # never decided below the cap: the test over all games, still going on
    going = stopping_verdict(_games("WL" * 20), "c", **bounds)
    assert going.verdict == Verdict.CONTINUE and going.wins + going.losses == 40
    capped = stopping_verdict(_games("WL" * 20), "c", **{**bounds, "max_games": 30})
    assert capped.verdict == Verdict.UNDECIDED and capped.wins + capped.losses == 30


def test_a_gate_passed_before_a_game_in_flight_finished_as_a_loss_passes(tmp_path: Path) -> None:
    """The gate itself, on a log whose SPRT left its bounds before its last game: a rerun on
    that log (as after a kill) stops at once and takes the verdict at the stopping time."""
    repository = tmp_path / "repo"
    publish_net(LineNet(), repository, tmp_path / "nets")
    candidate = publish_net(LineNet(), repository, tmp_path / "nets")
    folder = tmp_path / "gate"
    first = gate_by_match(repository, "gomoku", candidate, visits=2, max_games=6,
                          out_dir=folder, act=False)
    assert first.verdict == "undecided" and first.games == 6
    label = f"version:gomoku_policy/{candidate}:visits=2"
    entries = read_log(folder / LOG_FILE)[:5]
    for i, entry in enumerate(entries):  # the candidate wins four, then loses the fifth
        won = i < 4
        entry["score"] = 1.0 if won == (entry["black"] == label) else 0.0
    (folder / LOG_FILE).write_text("".join(json.dumps(e) + "\n" for e in entries),
                                        encoding="utf-8")
    # at elo1 400, 4-0-0 passes (LLR 3.09) and 4-0-1 does not (0.94)
    bounds = {"elo0": 0.0, "elo1": 400.0, "alpha": 0.05, "beta": 0.05, "max_games": 6}
    assert sprt(4, 0, 1, **bounds).verdict == Verdict.CONTINUE
    decision = gate_by_match(repository, "gomoku", candidate, visits=2, max_games=6,
                             out_dir=folder, act=False, elo0=0.0, elo1=400.0)
    assert decision.passed and (decision.wins, decision.draws, decision.losses) == (4, 0, 0)
    assert len(read_log(folder / LOG_FILE)) == 5  # no game played


def test_gate_refuses_an_equal_candidate_and_quarantines_it(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    serving = publish_net(LineNet(), repository, tmp_path / "nets")
    candidate = publish_net(LineNet(), repository, tmp_path / "nets")
    decision = gate_by_match(repository, "gomoku", candidate, visits=4, max_games=8,
                             out_dir=tmp_path / "gate")
    assert not decision.passed and decision.verdict in ("failed", "undecided")
    assert decision.serving_version == serving and decision.games <= 8
    assert candidate in quarantined_versions(repository, "gomoku_policy")
    assert "match against v1" in quarantine_reason(Path(decision.quarantined))
    meta = json.loads((Path(decision.quarantined) / "metadata.json").read_text())
    assert meta["match_gate"]["verdict"] == decision.verdict
    again = gate_by_match(repository, "gomoku", candidate, visits=4, max_games=8,
                          out_dir=tmp_path / "gate")  # a rerun, say after a kill
    assert again == decision


def test_a_quarantined_version_can_still_be_rated(repo, tmp_path: Path, capsys) -> None:
    repository, uniform, lines = repo
    moved = quarantine(repository, "gomoku_policy", lines, "refused by a test")
    assert lines not in list_versions(repository, "gomoku_policy")
    player = resolve(f"version:{lines}:visits=2", GOMOKU, repository)
    assert Path(player.folder) == moved and player.version == lines
    assert player.describe()["quarantined"] is True
    assert "quarantined" not in resolve(f"version:{uniform}", GOMOKU, repository).describe()
    with pytest.raises(EngineSpecError, match="Triton never loads a quarantined version"):
        resolve(f"version:{lines}:triton=127.0.0.1:8001", GOMOKU, repository)
    code = cli.main(["match", "--engine", f"version:{lines}:visits=2", "--engine",
                     f"policy:{uniform}", "--pairs", "1", "--max-moves", "30",
                     "--out", str(tmp_path / "m"), "--repository", str(repository)])
    out = capsys.readouterr().out
    assert code == 0 and f"version:gomoku_policy/{lines}:visits=2" in out
    assert len(read_log(tmp_path / "m" / LOG_FILE)) == 2


# ---------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("argv, words", [
    (["match", "--engine", "version:1"], "at least two --engine"),
    (["match", "--engine", "version:1", "--engine", "chess:1"], "unknown engine kind 'chess'"),
    (["match", "--engine", "version:1", "--engine", "gnugo", "--pairs", "0"], "must be >= 1"),
    (["match", "--engine", "version:9", "--engine", "version:1"], "no published version 9"),
    (["match", "--engine", "version:1", "--engine", "version:1"], "same name"),
    (["gate", "--candidate", "9"], "not published"),
])
def test_cli_argument_errors_are_clear(repo, argv, words, capsys) -> None:
    repository = repo[0]
    with pytest.raises(SystemExit) as exited:
        sys.exit(cli.main([*argv, "--repository", str(repository)]))
    assert exited.value.code == 2
    assert words in capsys.readouterr().err


def test_cli_match_prints_games_and_standings(repo, tmp_path: Path, capsys) -> None:
    repository, uniform, lines = repo
    code = cli.main(["match", "--engine", f"policy:{lines}", "--engine",
                     f"version:{uniform}:visits=2", "--pairs", "1", "--max-moves", "40",
                     "--out", str(tmp_path / "m"), "--repository", str(repository)])
    out = capsys.readouterr().out
    assert code == 0 and out.count("game ") >= 2 and "| player | Elo |" in out
    assert (tmp_path / "m" / "elo.png").is_file()


# ---------------------------------------------------------------------------- GNU Go, processes
@pytest.mark.integration
def test_gnugo_engines_play_a_short_go_game(tmp_path: Path) -> None:
    if find_gnugo() is None:
        pytest.skip("gnugo is not installed (apt-get install -y gnugo; .ci/run installs it)")
    go = get_game("go")
    players = [resolve("gnugo:level=0:name=low", go, tmp_path),
               resolve("gnugo:level=1:name=high", go, tmp_path)]
    report = run_match(go, players, tmp_path / "m", MatchConfig(pairs=1, size=9, max_moves=30,
                                                                 radius=2))
    assert report.played == 2
    for entry in report.entries:
        state = go.start(9)
        for move in entry["moves"]:
            assert state.legal_mask()[move]
            state = state.play(move)
        assert not entry["end"].startswith("illegal")
        assert (tmp_path / "m" / entry["record"]).read_text().startswith("(;")


@pytest.mark.integration
def test_games_in_parallel_processes(repo, tmp_path: Path) -> None:
    repository, uniform, lines = repo
    players = _players(repository, f"policy:{lines}", f"policy:{uniform}")
    report = run_match(GOMOKU, players, tmp_path / "m", MatchConfig(pairs=2, jobs=2,
                                                                     max_moves=40))
    assert report.played == 4
    assert np.isin([e["score"] for e in report.entries], [0, 0.5, 1]).all()


@pytest.mark.usefixtures("prefect_harness")
def test_match_flow_reports_standings_and_plot(repo, tmp_path: Path) -> None:
    from prefect.artifacts import Artifact

    from flows.match import match_flow

    repository, uniform, lines = repo
    out = match_flow(engines=[f"policy:{lines}", f"version:{uniform}:visits=2"], game="gomoku",
                     pairs=1, out=str(tmp_path / "m"), repository=str(repository),
                     max_moves=40)
    assert out["played"] == 2 and Path(out["plot"]).is_file()
    artifact = Artifact.get("match-standings")
    assert artifact is not None and "| player | Elo |" in artifact.data
    assert out["plot"] in artifact.data
