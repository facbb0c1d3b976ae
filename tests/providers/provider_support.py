"""Support for the key provider tests: the real servers they run against (moto's KMS on
loopback, a SoftHSM2 token in a temporary directory), settings, and a keyring backend.
Used by conftest.py, the tests and measure_latency.py."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import keyring.backend
import keyring.errors

from toolkit_vault.keys.providers import ProviderSettings

PLUGINS = Path(__file__).parent / "plugins"
SOFTHSM_MODULE = os.environ.get(
    "TOOLKIT_VAULT_TEST_PKCS11_MODULE", "/usr/lib/softhsm/libsofthsm2.so"
)
TOKEN_LABEL = "tkv-test"
USER_PIN = "4711-tkv-test"
SO_PIN = "8765-tkv-so"


def key_cells(*cells: tuple[str, str]) -> Any:
    """A test's (key provider, database) pairs, not the whole product of the two (conftest.py
    then leaves its key provider alone): where a test proves storage on both databases and
    each provider's part of a flow, the file provider runs on both and every other provider
    on one. What a provider does alone is its own tests' (tests/providers/)."""
    import pytest

    params = [
        pytest.param(provider, database, marks=pytest.mark.postgres)
        if database == "postgres"
        else pytest.param(provider, database)
        for provider, database in cells
    ]
    return pytest.mark.parametrize(
        ("key_provider", "database_url"), params, indirect=["database_url"]
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _moto_command() -> list[str]:
    """moto's server, run by `moto_server_lazy` (the same server, its KMS keys made faster)."""
    if importlib.util.find_spec("moto") is None:
        raise RuntimeError("moto_server is not installed: the dev extra installs moto[server]")
    return [sys.executable, str(Path(__file__).parent / "moto_server_lazy.py")]


class MotoServer:
    """`moto_server` on a free loopback port, as a real HTTP endpoint."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, attempts: int = 3) -> str:
        for _ in range(attempts):  # a free port can be taken between probe and bind
            port = free_port()
            with self.log.open("ab") as out:
                self.process = subprocess.Popen(
                    [*_moto_command(), "-H", "127.0.0.1", "-p", str(port)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            self.url = f"http://127.0.0.1:{port}"
            if self._ready():
                return self.url
            self.stop()
        raise RuntimeError(f"moto_server did not start; see {self.log}")

    def _ready(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/moto-api/", timeout=1):  # noqa: S310
                    return True
            except urllib.error.HTTPError:  # any HTTP answer: the server is up
                return True
            except OSError:
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def make_softhsm_token(directory: Path) -> Path:
    """A fresh SoftHSM2 configuration with one initialized token; returns the config path,
    to be put in SOFTHSM2_CONF before the PKCS#11 module is first loaded in a process."""
    if not Path(SOFTHSM_MODULE).exists():
        raise RuntimeError(
            f"{SOFTHSM_MODULE} is missing: scripts/test installs softhsm2 "
            "(scripts/components/softhsm2.sh)"
        )
    tokens = directory / "tokens"
    tokens.mkdir(parents=True)
    conf = directory / "softhsm2.conf"
    conf.write_text(
        f"directories.tokendir = {tokens}\nobjectstore.backend = file\nlog.level = ERROR\n"
    )
    subprocess.run(
        [
            "softhsm2-util",
            "--init-token",
            "--free",
            "--label",
            TOKEN_LABEL,
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ],
        env={**os.environ, "SOFTHSM2_CONF": str(conf)},
        check=True,
        capture_output=True,
    )
    return conf


def copy_softhsm_token(conf: Path, directory: Path) -> Path:
    """A copy of the token `make_softhsm_token` made for `conf`, with a configuration of its
    own in `directory`: the same token (label, PINs, no keys yet) in new files, without
    running softhsm2-util again."""
    tokens = directory / "tokens"
    shutil.copytree(conf.parent / "tokens", tokens)
    copied = directory / "softhsm2.conf"
    copied.write_text(conf.read_text().replace(str(conf.parent / "tokens"), str(tokens), 1))
    return copied


def settings(tmp_path: Path, **options: str) -> ProviderSettings:
    return ProviderSettings(tmp_path / "home", "vault-test", options)


class MemoryKeyring(keyring.backend.KeyringBackend):
    """A secure-looking in-memory backend: the OS keyring's interface, no OS keyring."""

    priority = 10  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[tuple[str, str], str] = {}
        self.locked = False

    def get_password(self, service: str, username: str) -> str | None:
        if self.locked:
            raise keyring.errors.KeyringLocked("the keyring is locked")
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        if self.locked:
            raise keyring.errors.KeyringLocked("the keyring is locked")
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        del self.entries[(service, username)]


# keyring registers every backend class for discovery; keep ours out of other tests' way.
keyring.backend.KeyringBackend._classes.discard(MemoryKeyring)
