"""Fixtures for the key provider tests: real servers, started once per test process.

`moto_endpoint` runs moto's KMS as an HTTP server on a free loopback port; `softhsm_conf`
makes a SoftHSM2 token in a temporary directory and points SOFTHSM2_CONF at it before the
PKCS#11 module is first loaded. Both are torn down at the end of the session. A component
that cannot start fails the tests that need it (never a skip): scripts/test installs them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import keyring
import keyring.core
import pytest
from provider_support import (
    SOFTHSM_MODULE,
    TOKEN_LABEL,
    USER_PIN,
    MemoryKeyring,
    MotoServer,
    make_softhsm_token,
)


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        url = server.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """boto3's standard configuration for the tests: dummy credentials from the
    environment, no ~/.aws of the developer's, no instance metadata lookups."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def kms(moto_endpoint: str, aws_env: None) -> Any:
    """A boto3 KMS client on the moto server, for setting up and inspecting keys."""
    return boto3.client("kms", endpoint_url=moto_endpoint)


@pytest.fixture
def kms_key(kms: Any) -> str:
    """A fresh KMS key's ARN."""
    return str(kms.create_key(Description="tkv test")["KeyMetadata"]["Arn"])


@pytest.fixture(scope="session")
def softhsm_conf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    try:
        conf = make_softhsm_token(tmp_path_factory.mktemp("softhsm"))
    except (RuntimeError, OSError) as exc:
        pytest.fail(f"SoftHSM2 is required for the pkcs11 provider tests: {exc}")
    previous = os.environ.get("SOFTHSM2_CONF")
    os.environ["SOFTHSM2_CONF"] = str(conf)
    try:
        yield conf
    finally:
        import pkcs11

        pkcs11.unload(SOFTHSM_MODULE)
        if previous is None:
            os.environ.pop("SOFTHSM2_CONF", None)
        else:
            os.environ["SOFTHSM2_CONF"] = previous


@pytest.fixture
def pin_file(tmp_path: Path) -> Path:
    path = tmp_path / "pkcs11-pin"
    path.write_text(USER_PIN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def pkcs11_options(softhsm_conf: Path, pin_file: Path) -> dict[str, str]:
    """Options for a provider on the test token, under a key label of its own."""
    return {
        "module": SOFTHSM_MODULE,
        "token_label": TOKEN_LABEL,
        "key_label": f"tkv-{uuid.uuid4().hex[:12]}",
        "pin_file": str(pin_file),
    }


@pytest.fixture
def memory_keyring(monkeypatch: pytest.MonkeyPatch) -> MemoryKeyring:
    monkeypatch.setattr(keyring.core, "_keyring_backend", keyring.core._keyring_backend)
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    return backend
