"""A plug-in algorithm's keys count with their own tags (docs/own/algorithm.md): `app` refuses the key as a
fedsuite.app setting with the plug-in's own words, and `client` makes a client share it with the server."""

from __future__ import annotations

import pytest

from fedsuite.app import settings
from fedsuite.config.run_config import ConfigError, Key
from fedsuite.registry import known as registry
from fedsuite.registry.plugins import AlgorithmRegistry

FEDAVG, FEDAVG_CLIENT = "fedsuite.strategies.fedavg:FedAvg", "fedsuite.clients.fedavg:FedAvgClient"


@pytest.fixture
def tagged(monkeypatch):
    keys = (
        Key("tagged-source", "", "where its data lives", app="your app brings its own data"),
        Key("tagged-shared", 0.5, "a setting every client must hold as the server does", client=True),
    )
    plugin = registry.Algorithm("tagged", FEDAVG, FEDAVG_CLIENT, "", "", keys=keys)
    built_in = [registry.ALGORITHMS[name] for name in registry.ALGORITHMS.built_in]
    plugged = AlgorithmRegistry(built_in, discover=lambda: [])
    plugged.register(plugin)
    monkeypatch.setattr(registry, "ALGORITHMS", plugged)
    return plugin


def test_a_plugin_keys_app_tag_refuses_it_as_a_setting(tagged):
    with pytest.raises(
        ConfigError, match=r"tagged_source: not a fedsuite.app setting \(your app brings its own data\)"
    ):
        settings.run_config("tagged", {"tagged_source": "/data"})
    assert "tagged-source" not in settings.allowed_keys() and "tagged-shared" in settings.allowed_keys()


def test_a_plugin_keys_client_tag_makes_clients_share_it(tagged):
    cfg = settings.run_config("tagged", {"tagged_shared": 0.25})
    assert "tagged-shared" in settings.client_keys(cfg)
    assert '"tagged-shared": 0.25' in settings.shared_settings(cfg)
