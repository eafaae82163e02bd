"""Registers the harness plugin for runs from a checkout that did not install it."""

from __future__ import annotations

import pytest


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    if not pluginmanager.has_plugin("batch_position_harness"):
        import harness.plugin

        pluginmanager.register(harness.plugin, "batch_position_harness")
