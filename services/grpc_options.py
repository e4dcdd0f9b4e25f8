"""gRPC channel options shared by every client of the platform (search service, Triton).

gRPC's default reconnect backoff starts at 1 s and grows by 1.6x per failed attempt up to 120 s
(with +-20 % jitter), so a client that kept trying through a 60 s outage could wait up to ~47 s
more after the server was back. With the options below a channel retries at least every
`MAX_RECONNECT_BACKOFF_MS` (x 1.2 with the jitter): it is connected again well within a second
of the server listening, whatever the outage's length. A connection attempt to a host that
refuses it costs next to nothing, so the short period is cheap.

The DNS resolver otherwise re-resolves a name at most every 30 s: a server that comes back on a
new address (a restarted container or pod behind a name) would stay unreachable that long.
"""

from __future__ import annotations

INITIAL_RECONNECT_BACKOFF_MS = 100
MIN_RECONNECT_BACKOFF_MS = 100
# x 1.2 jitter at most: 600 ms between attempts, leaving room for the handshake within 1 s
MAX_RECONNECT_BACKOFF_MS = 500
DNS_MIN_RERESOLUTION_MS = 500

RECONNECT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", INITIAL_RECONNECT_BACKOFF_MS),
    ("grpc.min_reconnect_backoff_ms", MIN_RECONNECT_BACKOFF_MS),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
    ("grpc.dns_min_time_between_resolutions_ms", DNS_MIN_RERESOLUTION_MS),
)
