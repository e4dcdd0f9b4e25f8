"""Adapters between the search service and the outside world.

Modules:
    frontend    what the text-protocol front-ends share: one search client, the stdin/stdout loop
    gomocup     a Gomocup / Piskvork protocol brain that asks the search service for its moves
    gtp         a GTP engine for Go (`movepred gtp`) driving the search service
    katago_analysis  KataGo's JSON analysis engine protocol (`movepred analysis-engine`) over
                the search service; katago_query checks its queries
    sgf_export  `movepred play`: the service playing itself or a reference player, the games
                written by the record codecs (`services.records.sgf_writer`)
"""
