"""A gateway in front of a fleet of engine replicas: discovery, health, routing, failover
budget and limits shared between gateway replicas through Redis.

Pure cores (`membership`, `health`, `router`, `affinity`, `retry_budget`, `fleet`) take
`now` and return decisions; the I/O shells (`sources` for DNS and files, `probe` for
/health, `shared_state` for Redis) carry them out. docs/gateway.md, "Fleet: discovery,
health, routing, shared limits", documents the semantics and the defaults.
"""
