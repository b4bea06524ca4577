"""The output predictor's history is bounded: tenants may come from a client's header."""

from __future__ import annotations

from burstguard.core.gateway.config import PredictorConfig
from burstguard.core.gateway.predictor import OutputPredictor


def test_history_keeps_only_the_most_recently_used_keys() -> None:
    predictor = OutputPredictor(PredictorConfig(max_history_keys=40, min_samples=1))
    for _ in range(3):
        predictor.observe(100, 10, "standard", "steady", "/v1/completions", 10)
    for i in range(10_000):  # a client inventing a tenant per request
        predictor.observe(100, 10, "standard", f"t{i}", "/v1/completions", 90)
        predictor.observe(100, 10, "standard", "steady", "/v1/completions", 10)
    assert len(predictor) <= 40
    # the tenant in use keeps its own history (10%), the invented ones are gone
    assert predictor.predict(100, 10, "standard", "steady", "/v1/completions") == 10
    assert len(predictor) <= 40
