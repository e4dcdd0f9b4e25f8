"""KataGo analysis queries checked and turned into search-service positions: the parsing half of
`movepred analysis-engine` (`services.protocols.katago_analysis` answers them).

A query is checked field by field in the order KataGo's engine checks it
(cpp/command/analysis.cpp in github.com/lightvector/KataGo), with its error texts word for word,
so the first bad field answers ``{"id", "field", "error"}`` exactly as KataGo would. What KataGo
accepts and this service cannot do (ownership, move restrictions, search parameters) is accepted
and warned about (``{"id", "field", "warning"}``), as KataGo warns about rules its network does
not support.

Games: a `rules` value naming one of a registered game's rules (`Game.rule_names`: Gomoku's
"freestyle", "standard", "renju") is that game; any of KataGo's Go rules (a shorthand name or a
JSON object of options) is Go, played under the rules the service serves (area scoring, simple
ko, suicide illegal, no handicap bonus), with a warning naming what differs. Locations are GTP
vertices for every game ("Q16", "pass"), or KataGo's "(x,y)" counted from the top-left.

Positions: the moves are replayed by the game's own rules (`Game.position_from_request`, then
`Position.legal_mask` / `play`), so an illegal move is refused here with KataGo's words. The
service needs moves that alternate from the first mover; KataGo takes any order. Where a colour
plays twice (or a Go game goes on after two passes) the position is sent as the board at that
point as set-up stones, then the alternating moves since, as KataGo itself clears its history
there; the game judges whether it takes such a position.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from services import coords
from services.api.movepred.v1 import search_pb2
from services.games.base import BLACK, WHITE, Game, InvalidRequest, Position
from services.games.go.game import GO
from services.games.registry import registered_games
from services.search.validation import MAX_VISITS

DEFAULT_VISITS = 500  # KataGo's analysis_example.cfg maxVisits
DEFAULT_PV_LEN = 15  # KataGo's analysisPVLen default: moves after the first
MAX_BOARD_LEN = 19  # KataGo's Board::MAX_LEN: its message names it
KATAGO_RULES_GAME = GO  # the game KataGo's rules describe (as GTP, a Go protocol)
PERSPECTIVES = {"black": BLACK, "b": BLACK, "white": WHITE, "w": WHITE, "sidetomove": None}

# the fields a query may have (KataGo's list); others get KataGo's "unused field" warning
EXPECTED_KEYS = frozenset({
    "id", "action", "terminateId", "turnNumbers", "boardXSize", "boardYSize", "initialStones",
    "moves", "initialPlayer", "analyzeTurns", "priorities", "rules", "komi",
    "whiteHandicapBonus", "overrideSettings", "maxVisits", "analysisPVLen",
    "rootFpuReductionMax", "rootPolicyTemperature", "includeMovesOwnership",
    "includeMovesOwnershipStdev", "includeOwnership", "includeOwnershipStdev", "includePolicy",
    "includePVVisits", "includeNoResultValue", "reportDuringSearchEvery",
    "firstReportDuringSearchAfter", "priority", "allowMoves", "avoidMoves",
})
# boolean fields asking for what the service has no output for: accepted, warned about
UNSUPPORTED_INCLUDES = {
    "includeOwnership": "the networks have no ownership head",
    "includeOwnershipStdev": "the networks have no ownership head",
    "includeMovesOwnership": "the networks have no ownership head",
    "includeMovesOwnershipStdev": "the networks have no ownership head",
    "includePVVisits": "the search service reports no visits along a PV",
    "includeNoResultValue": "the rules served have no no-result outcome",
}
# the overrideSettings this engine honours; others are warned about and ignored
OVERRIDES = ("maxVisits", "reportAnalysisWinratesAs")

# KataGo's messages (cpp/command/analysis.cpp), word for word
MOVES_FORMAT = 'Must be an array of pairs of the form: ["b" or "w", GTP board vertex]'
RULES_FORMAT = ('Must specify rules string, such as "chinese" or "tromp-taylor", or a JSON '
                'object with detailed rules parameters.')
BOARD_SIZE_ERROR = f"Must provide an integer from 2 to {MAX_BOARD_LEN}"
KOMI_ERROR = "Must be a integer or half-integer from -400.0 to 400.0"
AVOID_FORMAT = "Must be a list of dicts with subfields 'player', 'moves', 'untilDepth'"
TURN_NUMBERS_ERROR = "If provided, must be an array of integers indicating turns to terminate"


# ---- KataGo's Go rules -------------------------------------------------------------------
@dataclass(frozen=True)
class GoRules:
    """The parts of a KataGo ruleset that change the game (rules.cpp's fields)."""

    scoring: str = "AREA"
    ko: str = "SIMPLE"
    tax: str = "NONE"
    suicide: bool = False
    button: bool = False
    handicap_bonus: str = "0"
    komi: float = 7.5

    def differences(self, served: GoRules) -> list[str]:
        """What differs from `served`, in words ("ko POSITIONAL", "suicide allowed")."""
        out = []
        for name in ("scoring", "ko", "tax"):
            if getattr(self, name) != getattr(served, name):
                out.append(f"{name} {getattr(self, name)}")
        if self.suicide != served.suicide:
            out.append("suicide allowed" if self.suicide else "suicide illegal")
        if self.button != served.button:
            out.append("button" if self.button else "no button")
        return out


# what the service plays: area scoring, simple ko, suicide illegal (services.games.go.rules)
SERVED_GO_RULES = GoRules()
_SHORTHAND = {
    ("japanese", "korean"): GoRules("TERRITORY", "SIMPLE", "SEKI", komi=6.5),
    ("chinese",): GoRules(handicap_bonus="N"),
    ("chineseogs", "chinese_ogs", "chinese-ogs", "chinesekgs", "chinese_kgs", "chinese-kgs"):
        GoRules(ko="POSITIONAL", handicap_bonus="N"),
    ("ancientarea", "ancient-area", "ancient_area", "ancient area", "stonescoring",
     "stone-scoring", "stone_scoring", "stone scoring"): GoRules(tax="ALL"),
    ("ancientterritory", "ancient-territory", "ancient_territory", "ancient territory"):
        GoRules("TERRITORY", tax="ALL", komi=6.5),
    ("agabutton", "aga-button", "aga_button", "aga button"):
        GoRules(ko="SITUATIONAL", button=True, handicap_bonus="N-1", komi=7.0),
    ("aga", "bga", "french"): GoRules(ko="SITUATIONAL", handicap_bonus="N-1"),
    ("nz", "newzealand", "new zealand", "new-zealand", "new_zealand"):
        GoRules(ko="SITUATIONAL", suicide=True, komi=7.0),
    ("tromp-taylor", "tromp_taylor", "tromp taylor", "tromptaylor"):
        GoRules(ko="POSITIONAL", suicide=True),
    ("goe", "ing"): GoRules(ko="POSITIONAL", suicide=True),
}
KATAGO_RULES = {name: rules for names, rules in _SHORTHAND.items() for name in names}
_RULE_VALUES = {
    "ko": {"SIMPLE", "POSITIONAL", "SITUATIONAL", "SPIGHT"},
    "scoring": {"AREA", "TERRITORY"},
    "tax": {"NONE", "SEKI", "ALL"},
}
HANDICAP_BONUSES = ("0", "N", "N-1")


def parse_go_rules(value: Any) -> GoRules | None:
    """A KataGo rules value (a shorthand name or a JSON object of rule options, Tromp-Taylor
    for what it leaves out, as KataGo reads it) -> GoRules; None when KataGo could not parse it."""
    if isinstance(value, str):
        return KATAGO_RULES.get(value.strip().lower())
    if not isinstance(value, dict):
        return None
    rules = KATAGO_RULES["tromp-taylor"]
    options: dict[str, Any] = {}
    for key, item in value.items():
        name = "scoring" if key == "score" else key
        if name in _RULE_VALUES:
            if not isinstance(item, str) or item.upper() not in _RULE_VALUES[name]:
                return None
            options[name] = item.upper()
        elif name in ("suicide", "hasButton", "friendlyPassOk"):
            if not isinstance(item, bool):
                return None
            if name != "friendlyPassOk":
                options["suicide" if name == "suicide" else "button"] = item
        elif name == "whiteHandicapBonus":
            if item not in HANDICAP_BONUSES:
                return None
            options["handicap_bonus"] = item
        elif name == "komi":
            if not _is_number(item) or not _komi_ok(float(item)):
                return None
            options["komi"] = float(item)
        else:
            return None
    if "scoring" in options and "tax" not in options:  # KataGo: territory scoring taxes seki
        options["tax"] = "SEKI" if options["scoring"] == "TERRITORY" else "NONE"
    return GoRules(**{**rules.__dict__, **options})


def dump_line(obj: Any) -> str:
    """One JSON line as KataGo writes it: keys sorted, no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _komi_ok(komi: float) -> bool:
    return math.isfinite(komi) and -400.0 <= komi <= 400.0 and (komi * 2).is_integer()


# ---- a query -------------------------------------------------------------------------------
class QueryError(Exception):
    """A query KataGo would refuse: `field` None is a general error (no id)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Query:
    """What one analysis query asks of every turn it analyses."""

    id: str
    game: Game
    size: int
    max_visits: int
    pv_len: int = DEFAULT_PV_LEN
    include_policy: bool = False
    report_every_s: float | None = None  # reportDuringSearchEvery (None: final only)
    first_report_s: float | None = None
    perspective: int | None = BLACK  # None: the side to move


@dataclass(eq=False)
class TurnJob:
    """One turn of a query: the position sent, its state under the rules, its progress."""

    query: Query
    turn: int
    position: search_pb2.Position
    state: Position
    priority: int = 0
    status: str = "queued"  # queued, running, terminated, done
    call: Any = None


@dataclass
class Parsed:
    """A checked query: its turns (in turn order) and the warnings to write before them."""

    jobs: list[TurnJob]
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (field, message)


def parse_player(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    return {"b": BLACK, "black": BLACK, "w": WHITE, "white": WHITE}.get(value.strip().lower())


def parse_location(text: str, size: int) -> int | None:
    """A GTP vertex ("Q16", "pass") or KataGo's "(x,y)" (x from the left, y from the top)
    -> flat point y * size + x with y from the bottom, `size * size` for a pass; None when it
    is no point of the board."""
    token = text.strip()
    if token.startswith("(") and token.endswith(")"):
        parts = token[1:-1].split(",")
        if len(parts) != 2 or not all(p.strip().lstrip("-").isdigit() and p.strip().isascii()
                                      for p in parts):
            return None
        x, y_top = (int(p) for p in parts)
        if not (0 <= x < size and 0 <= y_top < size):
            return None
        return (size - 1 - y_top) * size + x
    try:
        point = coords.parse_gtp_vertex(token, size)
    except coords.VertexError:
        return None
    return size * size if point is None else point


def location_name(move: int, size: int) -> str:
    """Flat point (`size * size`: the pass) -> GTP vertex, as KataGo writes locations."""
    return coords.gtp_vertex(None if move >= size * size else move, size)


def _moves(query: dict, name: str, size: int, allow_pass: bool) -> list[tuple[int, int]]:
    """[[player, location], ...] -> (colour, flat move) pairs, with KataGo's errors."""
    value = query[name]
    if not isinstance(value, list):
        raise QueryError(MOVES_FORMAT, name)
    out = []
    for item in value:
        if (not isinstance(item, list) or len(item) != 2
                or not all(isinstance(x, str) for x in item)):
            raise QueryError(MOVES_FORMAT, name)
        color = parse_player(item[0])
        if color is None:
            raise QueryError(f"Could not parse player: {item[0]}", name)
        move = parse_location(item[1], size)
        if move is None or (not allow_pass and move == size * size):
            raise QueryError(f"Could not parse board location: {item[1]}", name)
        out.append((color, move))
    return out


def _integer(query: dict, name: str, low: int, high: int, message: str) -> int:
    value = query[name]
    if not _is_integer(value) or not low <= value <= high:
        raise QueryError(message, name)
    return int(value)


def _double(query: dict, name: str, low: float, high: float, message: str) -> float:
    value = query[name]
    if not _is_number(value) or not math.isfinite(value) or not low <= value <= high:
        raise QueryError(message, name)
    return float(value)


def _boolean(query: dict, name: str) -> bool:
    value = query[name]
    if not isinstance(value, bool):
        raise QueryError("Must be a boolean", name)
    return value


def integer_list(value: Any) -> list[int] | None:
    if not isinstance(value, list) or not all(_is_integer(x) for x in value):
        return None
    return [int(x) for x in value]


def _game_of(rules_value: Any) -> tuple[Game, int, GoRules | None]:
    """The query's game, its API rule and, for KataGo's Go rules, what they say."""
    if isinstance(rules_value, str):
        name = rules_value.strip().lower()
        for game in registered_games():
            if name in game.rule_names:
                return game, game.proto_rule(name), None
    if not isinstance(rules_value, str | dict):
        raise QueryError(RULES_FORMAT, "rules")
    rules = parse_go_rules(rules_value)
    if rules is None:
        shown = rules_value if isinstance(rules_value, str) else dump_line(rules_value)
        raise QueryError(f"Could not parse rules: {shown}", "rules")
    return KATAGO_RULES_GAME, 0, rules


def _request_field(exc: InvalidRequest) -> str:
    """The query field an API field of a refused position stands for."""
    name = exc.field.split(".", 1)[-1]
    for prefix, field_name in (("setup", "initialStones"), ("moves", "moves"),
                               ("komi", "komi"), ("rule", "rules"),
                               ("board_size", "boardXSize"), ("first_to_move", "initialPlayer")):
        if name.startswith(prefix):
            return field_name
    return "moves"


class _Replay:
    """A query's moves replayed under the game's rules: `state` the position now and
    `position` the API Position that reaches it (set-up stones, then alternating moves)."""

    def __init__(self, game: Game, size: int, rule: int, komi: float | None) -> None:
        self.game, self.size, self.rule, self.komi = game, size, rule, komi

    def restart(self, board: np.ndarray, first: int) -> None:
        """Start a segment: the stones of `board` as set-up, `first` to move."""
        size = self.size
        cells = board.reshape(-1)

        def points(color: int) -> list[search_pb2.Point]:
            return [search_pb2.Point(x=int(p) % size, y=int(p) // size)
                    for p in np.flatnonzero(cells == color)]

        position = search_pb2.Position(
            game=self.game.proto_game, game_name=self.game.name, rule=self.rule,
            board_size=size, setup_black=points(BLACK), setup_white=points(WHITE),
            first_to_move=first)
        if self.komi is not None:
            position.komi = self.komi
        self.state = self.game.position_from_request(position, "position")
        self.position = position

    def play(self, move: int) -> None:
        self.state = self.state.play(move)
        self.position.moves.append(self.game.move_point(move, self.size))

    def snapshot(self) -> tuple[search_pb2.Position, Position]:
        copy = search_pb2.Position()
        copy.CopyFrom(self.position)
        return copy, self.state


def parse_query(query: dict, *, default_visits: int = DEFAULT_VISITS,
                perspective: int | None = BLACK) -> Parsed:
    """Check an analysis query (a JSON object with a string id and no action) in KataGo's
    order and build its turns; QueryError names the first field that is wrong."""
    qid = query["id"]
    warnings: list[tuple[str, str]] = []
    for name in ("boardXSize", "boardYSize"):
        if name not in query:
            raise QueryError(BOARD_SIZE_ERROR, name)
    x_size = _integer(query, "boardXSize", 2, MAX_BOARD_LEN, BOARD_SIZE_ERROR)
    y_size = _integer(query, "boardYSize", 2, MAX_BOARD_LEN, BOARD_SIZE_ERROR)
    if y_size != x_size:
        raise QueryError("Must equal boardXSize: only square boards are served", "boardYSize")
    size = x_size
    stones = _moves(query, "initialStones", size, False) if "initialStones" in query else []
    if "moves" not in query:
        raise QueryError("Must specify an array of [player,location] pairs", "moves")
    moves = _moves(query, "moves", size, True)
    initial_player = None
    if "initialPlayer" in query:
        initial_player = parse_player(query["initialPlayer"])
        if initial_player is None:
            raise QueryError('Must be "b" or "w"', "initialPlayer")
    turns = [len(moves)]
    if "analyzeTurns" in query:
        listed = integer_list(query["analyzeTurns"])
        if listed is None:
            raise QueryError("Must specify an array of integers indicating turns to analyze",
                             "analyzeTurns")
        bad = next((t for t in listed if not 0 <= t <= len(moves)), None)
        if bad is not None:
            raise QueryError(f"Invalid turn number: {bad}", "analyzeTurns")
        turns = listed
    priorities: dict[int, int] = {}
    if "priorities" in query:
        listed = integer_list(query["priorities"])
        if listed is None:
            raise QueryError("Must specify an array of integers indicating priorities",
                             "priorities")
        if "analyzeTurns" not in query:
            raise QueryError("Can only specify when also specifying analyzeTurns", "priorities")
        if len(listed) != len(turns):
            raise QueryError("Must be of matching length to analyzeTurns", "priorities")
        priorities = dict(zip(turns, listed, strict=True))
    if "rules" not in query:
        raise QueryError(RULES_FORMAT, "rules")
    game, rule, go_rules = _game_of(query["rules"])
    komi = go_rules.komi if go_rules is not None else game.default_komi
    if "komi" in query:
        value = _double(query, "komi", -400.0, 400.0, KOMI_ERROR)
        if not _komi_ok(value):
            raise QueryError(KOMI_ERROR, "komi")
        if game.default_komi is None:
            warnings.append(("komi", f"{game.title} has no komi; ignored"))
        else:
            komi = value
    handicap_bonus = go_rules.handicap_bonus if go_rules is not None else "0"
    if "whiteHandicapBonus" in query:
        value = query["whiteHandicapBonus"]
        if not isinstance(value, str):
            raise QueryError("Must be a string", "whiteHandicapBonus")
        if value not in HANDICAP_BONUSES:
            raise QueryError(f"Could not parse white handicap bonus rule: {value}",
                             "whiteHandicapBonus")
        handicap_bonus = value
    max_visits = default_visits
    if "overrideSettings" in query:
        overrides = query["overrideSettings"]
        if not isinstance(overrides, dict):
            raise QueryError("Must be an object", "overrideSettings")
        if "maxVisits" in overrides:
            max_visits = _integer(overrides, "maxVisits", 1, 1 << 50,
                                  "Must be an integer from 1 to 2^50")
        if "reportAnalysisWinratesAs" in overrides:
            value = overrides["reportAnalysisWinratesAs"]
            if not isinstance(value, str) or value.strip().lower() not in PERSPECTIVES:
                raise QueryError("Could not set settings: could not parse "
                                 f"reportAnalysisWinratesAs: {value}", "overrideSettings")
            perspective = PERSPECTIVES[value.strip().lower()]
        ignored = sorted(k for k in overrides if k not in OVERRIDES)
        if ignored:
            warnings.append(("overrideSettings", "Config params not supported by this engine, "
                             "ignored: " + ",".join(ignored)))
    if "maxVisits" in query:
        max_visits = _integer(query, "maxVisits", 1, 1 << 50, "Must be an integer from 1 to 2^50")
    if max_visits > MAX_VISITS:
        warnings.append(("maxVisits", f"The search service searches at most {MAX_VISITS} "
                         f"visits; using {MAX_VISITS}"))
        max_visits = MAX_VISITS
    pv_len = DEFAULT_PV_LEN
    if "analysisPVLen" in query:
        pv_len = _integer(query, "analysisPVLen", 1, 1000, "Must be an integer from 1 to 1000")
    for name, low, high in (("rootFpuReductionMax", 0.0, 2.0),
                            ("rootPolicyTemperature", 0.01, 100.0)):
        if name in query:
            _double(query, name, low, high, f"Must be a number from {low} to {high}")
            warnings.append((name, "Not supported by this engine's search; ignored"))
    includes = {}
    for name in (*UNSUPPORTED_INCLUDES, "includePolicy"):
        if name in query:
            includes[name] = _boolean(query, name)
    report_every = first_report = None
    for name in ("reportDuringSearchEvery", "firstReportDuringSearchAfter"):
        if name in query:
            seconds = _double(query, name, 0.001, 1_000_000.0,
                              "Must be number of seconds from 0.001 to 1000000.0")
            if name == "reportDuringSearchEvery":
                report_every = first_report = seconds
            else:
                first_report = seconds
    if first_report is not None and report_every is None:
        report_every = math.inf  # KataGo: one report after firstReportDuringSearchAfter
    priority = 0
    if "priority" in query:
        if "priorities" in query:
            raise QueryError("Cannot specify both priority and priorities", "priority")
        priority = _integer(query, "priority", -(2 ** 62), 2 ** 62,
                            "Must be a number between -2^62 and 2^62")
    restricted = _check_move_restrictions(query, size)
    if restricted:
        warnings.append((restricted, "Not supported by this engine's search; the analysis is "
                         "of the unrestricted search"))
    if size not in game.sizes:
        low, high = game.sizes[0], game.sizes[-1]
        served = f"{low}x{low} only" if low == high else f"sizes {low} to {high}"
        raise QueryError(f"{game.title} is served on {served}, got {size}", "boardXSize")
    black = sum(1 for c, _ in stones if c == BLACK)
    handicap = black >= 2 and black == len(stones)  # handicap stones on the board
    if initial_player is None:
        initial_player = moves[0][0] if moves else WHITE if handicap else BLACK
    if go_rules is not None:
        differs = go_rules.differences(SERVED_GO_RULES)
        if handicap and handicap_bonus != "0":
            differs.append(f"white handicap bonus {handicap_bonus}")
        if differs:
            warnings.append(("rules", f"Rules {dump_line(query['rules'])} not supported by this "
                             f"engine ({', '.join(differs)}), using area scoring, simple ko, "
                             "suicide illegal, no white handicap bonus instead"))
    for name, wanted in includes.items():
        if wanted and name in UNSUPPORTED_INCLUDES:
            warnings.append((name, f"Not supported: {UNSUPPORTED_INCLUDES[name]}; "
                             "field ignored"))
    warnings += [(k, "Unexpected or unused field, do you have a typo?")
                 for k in query if k not in EXPECTED_KEYS]
    settings = Query(id=qid, game=game, size=size, max_visits=max_visits, pv_len=pv_len,
                     include_policy=includes.get("includePolicy", False),
                     report_every_s=report_every, first_report_s=first_report,
                     perspective=perspective)
    jobs = _turn_jobs(settings, rule, komi, stones, moves, initial_player, set(turns),
                      priorities, priority)
    return Parsed(jobs=jobs, warnings=warnings)


def _check_move_restrictions(query: dict, size: int) -> str | None:
    """avoidMoves / allowMoves checked as KataGo checks them; the name of the one given
    (the search does not apply it: `parse_query` warns)."""
    present = [name for name in ("allowMoves", "avoidMoves") if name in query]
    if not present:
        return None
    if len(present) == 2:
        raise QueryError("Cannot specify both allowMoves and avoidMoves", "allowMoves")
    name = present[0]
    entries = query[name]
    if not isinstance(entries, list):
        raise QueryError(AVOID_FORMAT, name)
    if name == "allowMoves" and len(entries) > 2:
        raise QueryError("Currently allowMoves only allows at most one entry per player", name)
    players = set()
    for entry in entries:
        if not isinstance(entry, dict) or not {"moves", "untilDepth", "player"} <= set(entry):
            raise QueryError(AVOID_FORMAT, name)
        player = parse_player(entry["player"])
        if player is None:
            raise QueryError('Must be "b" or "w"', "player")
        locations = entry["moves"]
        if not isinstance(locations, list) or not all(isinstance(s, str) for s in locations):
            raise QueryError("Must be an array of GTP board vertices", "moves")
        for text in locations:
            if parse_location(text, size) is None:
                raise QueryError(f"Could not parse board location: {text}", "moves")
        _integer(entry, "untilDepth", 1, 1_000_000_000, "Must be a positive integer")
        if name == "allowMoves" and player in players:
            raise QueryError("Cannot specify allowMoves more than once for the same player",
                             name)
        players.add(player)
    return name


def _turn_jobs(settings: Query, rule: int, komi: float | None,
               stones: Sequence[tuple[int, int]], moves: Sequence[tuple[int, int]],
               first: int, turns: set[int], priorities: dict[int, int],
               priority: int) -> list[TurnJob]:
    """Replay the moves under the game's rules and keep the position of each turn asked for
    (KataGo's errors: "Illegal move N: V" on `moves`; a position the game refuses names the
    field it came from)."""
    game, size = settings.game, settings.size
    replay = _Replay(game, size, rule, komi)
    board = np.zeros((size, size), dtype=np.int8)
    for color, point in stones:
        board[point // size, point % size] = color
    jobs = []
    try:
        replay.restart(board, first)
    except InvalidRequest as exc:
        raise QueryError(exc.message, _request_field(exc)) from exc
    for turn in range(len(moves) + 1):
        if turn in turns:
            if replay.state.is_over:  # a Go game analysed on after two passes
                over = game.result_text(replay.state) or "the game is over"
                try:
                    replay.restart(replay.state.board, replay.state.to_move)
                except InvalidRequest as exc:
                    raise QueryError(f"Invalid turn number: {turn} ({over})",
                                     "analyzeTurns") from exc
            position, state = replay.snapshot()
            jobs.append(TurnJob(settings, turn, position, state, priorities.get(turn, priority)))
        if turn == len(moves):
            break
        color, move = moves[turn]
        if color != replay.state.to_move or replay.state.is_over:
            try:  # KataGo clears its history here
                replay.restart(replay.state.board, color)
            except InvalidRequest as exc:
                raise QueryError(f"Illegal move {turn}: {location_name(move, size)} (the "
                                 f"position cannot be sent from there: {exc.message})",
                                 "moves") from exc
        legal = replay.state.legal_mask()
        if move >= len(legal) or not legal[move]:  # a pass in a game without one
            raise QueryError(f"Illegal move {turn}: {location_name(move, size)}", "moves")
        replay.play(move)
    return jobs
