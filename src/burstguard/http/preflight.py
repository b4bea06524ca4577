"""Pre-flight checks: fail in seconds with one clear message instead of a run of errors.

The target must answer GET /v1/models as an OpenAI-compatible server and serve the model
asked for (when no model is given and it serves exactly one, that one is used).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from burstguard.errors import TargetError
from burstguard.wire.headers import bearer


def normalize_target(url: str) -> str:
    """`http://host:port`, `http://host:port/` and `http://host:port/v1` -> the base URL."""
    base = url.strip().rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    if not base.startswith(("http://", "https://")):
        raise TargetError(f"--target {url!r}: expected an http:// or https:// URL")
    return base


def served_cards(
    base: str, timeout_s: float = 5.0, api_key: str | None = None
) -> list[dict[str, Any]]:
    """The model cards the target lists (`id`, and `max_model_len` on vLLM); TargetError when
    it is unreachable, refuses the key, or is not OpenAI-like."""
    url = f"{base}/v1/models"
    try:
        req = urllib.request.Request(url, headers=bearer(api_key))
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = resp.read(1 << 20)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            said = "refused the API key given" if api_key else "asks for an API key"
            raise TargetError(
                f"{base} {said} (GET /v1/models: HTTP {exc.code}); pass --api-key KEY "
                "or set BURSTGUARD_API_KEY"
            ) from None
        raise TargetError(
            f"{base} does not look like an OpenAI-compatible server: "
            f"GET /v1/models returned HTTP {exc.code}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TargetError(f"cannot reach {base}: {reason}") from None
    try:
        cards = json.loads(body)["data"]
        if not all(isinstance(c, dict) and "id" in c for c in cards):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise TargetError(
            f"{base} does not look like an OpenAI-compatible server: "
            "GET /v1/models did not return a model list"
        ) from None
    return list(cards)


def served_models(base: str, timeout_s: float = 5.0, api_key: str | None = None) -> list[str]:
    """The model ids the target lists."""
    return [str(c["id"]) for c in served_cards(base, timeout_s, api_key)]


def check_target(target: str, model: str | None, api_key: str | None = None) -> tuple[str, str]:
    """Returns (base URL, model name) after checking the target serves that model."""
    base, card = target_card(target, model, api_key)
    return base, str(card["id"])


def target_card(
    target: str, model: str | None, api_key: str | None = None
) -> tuple[str, dict[str, Any]]:
    """(base URL, the model's card) after checking the target serves that model (the only
    one it serves, when `model` is None)."""
    base = normalize_target(target)
    cards = served_cards(base, api_key=api_key)
    listed = ", ".join(str(c["id"]) for c in cards) or "none"
    if model is None:
        if len(cards) != 1:
            raise TargetError(f"give --model: {base} serves {listed}")
        return base, cards[0]
    card = next((c for c in cards if c["id"] == model), None)
    if card is None:
        raise TargetError(f"model {model!r} is not served by {base} (it serves: {listed})")
    return base, card


def serves_metrics(base: str, timeout_s: float = 3.0, api_key: str | None = None) -> bool:
    """True when GET /metrics answers Prometheus text with a series bench records (an
    engine's or the gateway's), so a scenario can scrape it without being asked to."""
    from burstguard.scrape import DEFAULT_SERIES, parse_metrics

    try:
        req = urllib.request.Request(f"{base}/metrics", headers=bearer(api_key))
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            text = resp.read(8 << 20).decode("utf-8")
        samples = parse_metrics(text, only=DEFAULT_SERIES)
    except (urllib.error.URLError, OSError, ValueError, UnicodeDecodeError):
        return False
    return bool(samples)
