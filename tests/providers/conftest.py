"""Fixtures for the key provider tests, on the real servers of tests/conftest.py.

`moto_endpoint` (moto's KMS as an HTTP server on a free loopback port), `aws_env` and
`softhsm_conf` (a SoftHSM2 token in a temporary directory, SOFTHSM2_CONF pointing at it
before the PKCS#11 module is first loaded) live there, shared with the `home` fixture. A
component that cannot start fails the tests that need it (never a skip): scripts/test
installs them.
"""

from __future__ import annotations

import uuid
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
)


@pytest.fixture
def kms(moto_endpoint: str, aws_env: None) -> Any:
    """A boto3 KMS client on the moto server, for setting up and inspecting keys."""
    return boto3.client("kms", endpoint_url=moto_endpoint)


@pytest.fixture
def kms_key(kms: Any) -> str:
    """A fresh KMS key's ARN."""
    return str(kms.create_key(Description="tkv test")["KeyMetadata"]["Arn"])


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
