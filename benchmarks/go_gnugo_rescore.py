"""Go match games scored again by GNU Go, dead stones removed: does the area count agree?

    nice .venv/bin/python benchmarks/go_gnugo_rescore.py --match runs/go9/gnugo10
        [--gnugo /usr/games/gnugo] [--anchor NAME] [--json out.json]

Why: a match ends a Go game after two passes and scores it by area with every stone on the
board alive (`Game.terminal_value`, the rules the search plays). A player that passes while
its opponent's dead stones still stand in its territory loses those points there; GNU Go
passes in such positions, expecting the dead stones to be removed at scoring. So a result
against GNU Go by the bare area count can flatter the engine that plays on. This script
replays every record of a match folder (`records/`, written by `services.match.runner`) in
``gnugo --chinese-rules --score aftermath``, which plays the position out until the dead
stones are captured and then counts, and prints per game both verdicts, how often they agree,
and the standings (Bradley-Terry Elo with its 95% interval) by each count.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.match.gtp_process import find_gnugo  # noqa: E402
from services.match.results import read_log  # noqa: E402
from services.ratings.bradley_terry import Game, fit  # noqa: E402

RESULT = re.compile(r"(Black|White) wins by ([0-9.]+) points?|(Jigo)", re.IGNORECASE)


def parse_score(text: str) -> tuple[str, float]:
    """GNU Go's last verdict in `text` as (winner "black"/"white"/"", margin); ValueError when
    the text holds none."""
    found = RESULT.findall(text)
    if not found:
        raise ValueError(f"no score in GNU Go's answer: {text.strip()[-200:]!r}")
    colour, margin, jigo = found[-1]
    if jigo:
        return "", 0.0
    return colour.lower(), float(margin)


def gnugo_score(binary: str, record: Path, timeout_s: float = 600.0) -> tuple[str, float]:
    """(winner, margin) of `record` after GNU Go's aftermath play-out."""
    done = subprocess.run([binary, "--chinese-rules", "--score", "aftermath", "-l", str(record)],
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    return parse_score(done.stdout + done.stderr)


def score_of(winner: str) -> float:
    """Black's score of a game won by `winner` ("" for a draw)."""
    return 1.0 if winner == "black" else 0.0 if winner == "white" else 0.5


def standings(entries: list[dict], winners: list[str], anchor: str) -> list[dict]:
    """Elo by the given winners, anchored at `anchor`."""
    games = [Game(e["black"], e["white"], score_of(w)) for e, w in zip(entries, winners,
                                                                           strict=True)]
    ratings = fit(games, anchor)
    return [{"player": str(r.player), "elo": round(r.elo, 1), "low": round(r.low, 1),
             "high": round(r.high, 1), "games": r.games, "score": round(r.score, 3)}
            for r in ratings.values()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    p.add_argument("--match", type=Path, required=True, help="a match folder (games.jsonl)")
    p.add_argument("--gnugo", default=None, help="the gnugo binary (default: found)")
    p.add_argument("--anchor", default=None, help="the player rated 0 (default: the first)")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args(argv)
    binary = find_gnugo(args.gnugo)
    if binary is None:
        print("error: gnugo not found (apt-get install gnugo)", file=sys.stderr)
        return 2
    entries = [e for e in read_log(args.match / "games.jsonl") if e.get("record")]
    if not entries:
        print(f"error: no game with a record in {args.match}", file=sys.stderr)
        return 2
    ours, theirs, rows = [], [], []
    for number, entry in enumerate(entries, 1):
        winner, margin = gnugo_score(binary, args.match / entry["record"])
        ours.append(entry["winner"])
        theirs.append(winner)
        rows.append({"id": entry["id"], "black": entry["black"], "white": entry["white"],
                     "area_winner": entry["winner"], "gnugo_winner": winner,
                     "gnugo_margin": margin, "plies": entry["plies"]})
        print(f"{number}/{len(entries)} {entry['black']} (B) vs {entry['white']} (W): area "
              f"{entry['winner'] or 'draw'}, GNU Go {winner or 'jigo'} by {margin:g}",
              flush=True)
    agree = sum(a == b for a, b in zip(ours, theirs, strict=True))
    anchor = args.anchor or entries[0]["black"]
    out = {"games": len(entries), "agree": agree,
           "area": standings(entries, ours, anchor),
           "gnugo_aftermath": standings(entries, theirs, anchor), "rows": rows}
    print(f"the two counts agree on {agree} of {len(entries)} games")
    for name in ("area", "gnugo_aftermath"):
        print(f"standings by {name}:")
        for r in out[name]:
            print(f"  {r['player']}: Elo {r['elo']:+.0f} [{r['low']:+.0f}, {r['high']:+.0f}], "
                  f"score {r['score']:.3f} over {r['games']} games")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
