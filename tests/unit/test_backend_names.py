"""Backend names (what metrics, logs and summaries call a backend instead of its URL) and
the /metrics settings."""

from __future__ import annotations

import pytest

from burstguard.core.fleet.names import BackendNames, hashed_name
from burstguard.core.gateway.config import GatewayConfig
from burstguard.errors import ConfigError, UserError
from burstguard.live.gateway.cli import load_config


def test_static_backends_are_named_by_place_or_their_name() -> None:
    cfg = GatewayConfig.from_dict(
        {"backends": [{"url": "http://10.0.0.7:8000/"}, {"url": "http://10.0.0.8:8000",
                                                          "name": "h100-east"}]}
    )  # fmt: skip
    names = cfg.backend_names()
    assert names("http://10.0.0.7:8000") == "backend-0"  # the normalised URL's name
    assert names("http://10.0.0.8:8000") == "h100-east"


def test_a_discovered_backend_gets_a_stable_name_without_its_address() -> None:
    names = BackendNames([("http://10.0.0.7:8000", None)])
    url = "http://10.1.2.3:8000"
    name = names(url)
    assert name.startswith("backend-") and "10.1.2.3" not in name and "8000" not in name
    # the same on re-discovery, on another gateway replica, after a restart
    assert name == names(url) == BackendNames([])(url) == hashed_name(url)
    assert names("http://10.1.2.4:8000") != name


def test_backend_labels_url_names_them_by_url() -> None:
    cfg = GatewayConfig.from_dict(
        {"backends": [{"url": "http://a:1", "name": "x"}], "backend_labels": "url"}
    )
    assert cfg.backend_names()("http://a:1") == "http://a:1"
    assert cfg.backend_names()("http://b:1") == "http://b:1"


@pytest.mark.parametrize(
    ("backends", "message"),
    [
        ([{"url": "http://a:1", "name": "backend-1"}, {"url": "http://b:1"}],
         "backends.1: the name 'backend-1' is taken"),
        ([{"url": "http://a:1", "name": "x"}, {"url": "http://b:1", "name": "x"}],
         "backends.1: the name 'x' is taken"),
        ([{"url": "http://a:1", "name": "http://a:1"}], "backends.0.name"),
    ],
)  # fmt: skip
def test_bad_names_are_refused(backends: list[dict[str, str]], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GatewayConfig.from_dict({"backends": backends})


def test_the_metrics_listener_must_differ_from_the_main_one() -> None:
    with pytest.raises(ConfigError, match=r"metrics\.listen: the same address as listen"):
        GatewayConfig.from_dict({"metrics": {"listen": {"port": 8080}}})
    with pytest.raises(ConfigError, match=r"metrics\.api_key"):
        GatewayConfig.from_dict({"metrics": {"api_key": "short"}})


def test_metrics_listen_flag() -> None:
    cfg = load_config(None, ["http://x:1"], None, None, "0.0.0.0:9090")
    assert cfg.metrics.listen is not None
    assert (cfg.metrics.listen.host, cfg.metrics.listen.port) == ("0.0.0.0", 9090)
    for bad in ("9090", "host:", "host:port"):
        with pytest.raises(UserError, match="--metrics-listen"):
            load_config(None, ["http://x:1"], None, None, bad)
