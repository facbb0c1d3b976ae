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


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    if not all(os.access(binary, os.X_OK) for binary in (CHROMIUM, CHROMEDRIVER)):
        pytest.fail("Chromium is missing: scripts/components/chromium.sh installs it")
    with chromium(tmp_path) as driver:
        yield driver
