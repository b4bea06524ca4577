"""Checks for what deploy/ ships: PromQL that means what it says, manifests that validate.

- `catalogue`: every metric name a query may use, its type and who exports it.
- `expressions`: the PromQL inside rendered manifests (KEDA triggers, rules, dashboard).
- `lint`: static rules over one expression (rate() of a gauge, removed vLLM names, KEDA
  queries that can return several series, windows shorter than four scrapes).
- `manifests`: `kubectl kustomize` and schema validation (Kubernetes and vendored CRDs).
- `tree`: all of that over every overlay of a deploy/ tree.
- `prometheus`: a local Prometheus process and its HTTP API; `live`: the same
  expressions run against it. `stack`: gateway + emulators + Prometheus for a burst.
"""
