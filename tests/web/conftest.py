"""Fixtures of the web tests: a vault with the web test toolkits, a real `serve` of it, and
headless Chromium. SQLite only here; the end-to-end module runs on PostgreSQL too."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings

from web_support import CHROMEDRIVER, CHROMIUM, Server, chromium, serve, web_registry


@pytest.fixture(params=["sqlite"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'home' / 'vault.db'}"


@pytest.fixture
def vault(home: VaultSettings) -> Iterator[Vault]:
    opened = open_vault(home, web_registry())
    yield opened
    opened.store.engine.dispose()


@pytest.fixture
def server(vault: Vault, cli_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    with serve(cli_env, tmp_path, vault) as running:
        yield running


@pytest.fixture(scope="session")
def _chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """One Chromium per test worker: starting one took most of a browser test's set-up."""
    if not all(os.access(binary, os.X_OK) for binary in (CHROMIUM, CHROMEDRIVER)):
        pytest.fail("Chromium is missing: scripts/components/chromium.sh installs it")
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


@pytest.fixture
def browser(_chromium: WebDriver) -> Iterator[WebDriver]:
    """The worker's Chromium as a new one would be: one blank window of the first size, no
    cookies, cache or storage of an earlier test (each test's server has its own port, so
    its origin is new too)."""
    yield _chromium
    for handle in _chromium.window_handles[1:]:
        _chromium.switch_to.window(handle)
        _chromium.close()
    _chromium.switch_to.window(_chromium.window_handles[0])
    _chromium.get("about:blank")
    _chromium.execute_cdp_cmd("Network.clearBrowserCookies", {})
    _chromium.execute_cdp_cmd("Network.clearBrowserCache", {})
    _chromium.execute_cdp_cmd("Storage.clearDataForOrigin", {"origin": "*", "storageTypes": "all"})
    _chromium.set_window_size(1200, 1000)
