"""GTP's `ponder on|off` / --ponder and the Gomocup brain's INFO ponder / --ponder reach the
GenMove requests they send."""

from __future__ import annotations

from services.api.movepred.v1 import search_pb2
from services.protocols import gomocup, gtp


class RecordingClient:
    """A search client that answers every GenMove with the first empty point it can name and
    keeps each call's options."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def genmove(self, position, **options) -> search_pb2.GenMoveResponse:
        self.calls.append(options)
        taken = {(p.x, p.y) for p in getattr(position, "moves", [])} | {
            tuple(p) for p in (position if isinstance(position, list) else [])}
        x = next(i for i in range(19) if (i, 0) not in taken)
        return search_pb2.GenMoveResponse(move=search_pb2.Point(x=x, y=0),
                                          pondering=options.get("ponder", False))

    def close(self) -> None:
        pass


def test_gtp_ponder_command_and_flag():
    client = RecordingClient()
    engine = gtp.GtpEngine("127.0.0.1:1", client_factory=lambda: client)
    assert engine.handle("genmove b").startswith("=")
    assert engine.handle("ponder on") == "=\n\n"
    assert engine.handle("genmove w").startswith("=")
    assert engine.handle("ponder off") == "=\n\n"
    assert engine.handle("genmove b").startswith("=")
    assert [c["ponder"] for c in client.calls] == [False, True, False]
    assert engine.handle("ponder maybe").startswith("? syntax error")
    assert engine.handle("known_command ponder") == "= true\n\n"
    args = gtp.argparse.ArgumentParser()
    gtp.add_arguments(args)
    engine = gtp.engine_from(args.parse_args(["--ponder"]))
    assert engine.ponder


def test_gomocup_info_ponder_and_flag():
    client = RecordingClient()
    brain = gomocup.Brain("127.0.0.1:1", client_factory=lambda: client)
    brain.handle("START 15")
    brain.handle(f"INFO {gomocup.PONDER_KEY} 1")
    brain.handle("BEGIN")
    brain.handle(f"INFO {gomocup.PONDER_KEY} 0")
    brain.handle("TURN 10,10")
    assert [c["ponder"] for c in client.calls[-2:]] == [True, False]
    assert brain.handle(f"INFO {gomocup.PONDER_KEY} yes")[0].startswith("ERROR INFO ponder")
    assert gomocup._parse_args(["--ponder"]).ponder
