"""The aws-kms provider against moto's KMS over HTTP: the context is KMS's own
EncryptionContext, the key is the configured one, and every failure names the provider."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from provider_support import settings

from toolkit_vault.crypto import new_key
from toolkit_vault.errors import DecryptionError
from toolkit_vault.keys.providers import ProviderError, blob_header
from toolkit_vault.keys.providers.aws_kms import AwsKmsProvider, encryption_context
from toolkit_vault.keys.providers.base import pack_blob, unpack_blob
from toolkit_vault.keys.providers.testing import CONTEXT

OTHER = (*CONTEXT[:-1], "elsewhere")


def _provider(tmp_path: Path, endpoint: str, **options: str) -> AwsKmsProvider:
    return AwsKmsProvider(settings(tmp_path, endpoint_url=endpoint, **options))


def test_encryption_context_is_enforced_by_kms_itself(
    tmp_path: Path, moto_endpoint: str, kms: Any, kms_key: str
) -> None:
    """Decrypting the payload straight from KMS: only the wrap's own context opens it, so
    the binding is KMS's, not a check in our code."""
    key = new_key()
    _, _, payload = unpack_blob(
        _provider(tmp_path, moto_endpoint, key_id=kms_key).wrap(key, CONTEXT)
    )
    opened = kms.decrypt(
        CiphertextBlob=payload, EncryptionContext=encryption_context(CONTEXT), KeyId=kms_key
    )
    assert opened["Plaintext"] == key.reveal()
    for context in (encryption_context(OTHER), {}, {"toolkit-vault": "master-wrap/v1"}):
        with pytest.raises(kms.exceptions.InvalidCiphertextException):
            kms.decrypt(CiphertextBlob=payload, EncryptionContext=context, KeyId=kms_key)


def test_encryption_context_is_readable_per_field() -> None:
    assert encryption_context((1, "vault-key", "vk-1")) == {
        "toolkit-vault": "master-wrap/v1",
        "tkv.0": "1",
        "tkv.1": "vault-key",
        "tkv.2": "vk-1",
    }


def test_a_blob_under_another_kms_key_is_refused_naming_it(
    tmp_path: Path, moto_endpoint: str, kms: Any, kms_key: str
) -> None:
    blob = _provider(tmp_path, moto_endpoint, key_id=kms_key).wrap(new_key(), CONTEXT)
    other_key = kms.create_key()["KeyMetadata"]["Arn"]
    with pytest.raises(ProviderError, match="wrapped under another KMS key") as caught:
        _provider(tmp_path, moto_endpoint, key_id=other_key).unwrap(blob, CONTEXT)
    assert kms_key in str(caught.value) and "key provider aws-kms" in str(caught.value)


def test_a_header_pointing_at_our_key_over_another_keys_ciphertext_is_opaque(
    tmp_path: Path, moto_endpoint: str, kms: Any, kms_key: str
) -> None:
    """The header says our key, the ciphertext is another key's: KMS answers AccessDenied,
    the access probe shows we may decrypt, so the blob is the problem."""
    other_key = kms.create_key()["KeyMetadata"]["Arn"]
    foreign = _provider(tmp_path, moto_endpoint, key_id=other_key).wrap(new_key(), CONTEXT)
    _, _, payload = unpack_blob(foreign)
    forged = pack_blob("aws-kms", kms_key, payload)
    with pytest.raises(DecryptionError):
        _provider(tmp_path, moto_endpoint, key_id=kms_key).unwrap(forged, CONTEXT)


def test_an_alias_works_and_blobs_name_the_key_arn(
    tmp_path: Path, moto_endpoint: str, kms: Any, kms_key: str
) -> None:
    kms.create_alias(AliasName="alias/tkv-test-alias", TargetKeyId=kms_key)
    provider = _provider(tmp_path, moto_endpoint, key_id="alias/tkv-test-alias")
    key = new_key()
    blob = provider.wrap(key, CONTEXT)
    assert blob_header(blob) == ("aws-kms", kms_key)
    assert provider.unwrap(blob, CONTEXT).reveal() == key.reveal()
    assert provider.status().current == kms_key


def test_create_master_key_makes_a_tagged_symmetric_key(
    tmp_path: Path, moto_endpoint: str, kms: Any
) -> None:
    provider = _provider(tmp_path, moto_endpoint)
    assert provider.status().current is None and "(none yet)" in provider.where
    with pytest.raises(ProviderError, match="no KMS key is configured"):
        provider.wrap(new_key(), CONTEXT)
    arn = provider.create_master_key()
    assert arn.startswith("arn:aws:kms:eu-west-1:") and arn in provider.where
    meta = kms.describe_key(KeyId=arn)["KeyMetadata"]
    assert (meta["KeyUsage"], meta["KeySpec"]) == ("ENCRYPT_DECRYPT", "SYMMETRIC_DEFAULT")
    tags = kms.list_resource_tags(KeyId=arn)["Tags"]
    assert {"TagKey": "toolkit-vault:vault-id", "TagValue": "vault-test"} in tags
    key = new_key()
    again = _provider(tmp_path, moto_endpoint, key_id=arn)
    assert again.unwrap(provider.wrap(key, CONTEXT), CONTEXT).reveal() == key.reveal()


def test_rotation_is_kms_on_demand_rotation(
    tmp_path: Path, moto_endpoint: str, kms: Any, kms_key: str
) -> None:
    provider = _provider(tmp_path, moto_endpoint, key_id=kms_key)
    assert provider.rotate() == kms_key
    assert provider.rotate() == kms_key
    assert len(kms.list_key_rotations(KeyId=kms_key)["Rotations"]) == 2
    assert provider.status().details["rotations"] == "2"


def test_retire_is_refused_with_what_to_do(
    tmp_path: Path, moto_endpoint: str, kms_key: str
) -> None:
    with pytest.raises(ProviderError, match="schedule its deletion in KMS yourself"):
        _provider(tmp_path, moto_endpoint, key_id=kms_key).retire(kms_key)


def test_an_unknown_key_is_a_refusal_naming_the_provider(
    tmp_path: Path, moto_endpoint: str, aws_env: None
) -> None:
    provider = _provider(tmp_path, moto_endpoint, key_id="alias/tkv-no-such-key")
    with pytest.raises(ProviderError, match=r"refused encrypt: NotFoundException") as caught:
        provider.wrap(new_key(), CONTEXT)
    assert "key provider aws-kms (AWS KMS key alias/tkv-no-such-key" in str(caught.value)


def test_a_key_policy_denial_is_a_refusal_not_a_decryption_error(
    tmp_path: Path, moto_endpoint: str, kms: Any
) -> None:
    deny = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Deny", "Principal": "*", "Action": "kms:*", "Resource": "*"}],
    }
    arn = kms.create_key(Policy=json.dumps(deny))["KeyMetadata"]["Arn"]
    provider = _provider(tmp_path, moto_endpoint, key_id=arn)
    with pytest.raises(ProviderError, match="refused describe_key: AccessDeniedException"):
        provider.status()


def test_no_credentials_is_a_clear_error(
    tmp_path: Path, moto_endpoint: str, kms_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(ProviderError, match="found no AWS credentials") as caught:
        _provider(tmp_path, moto_endpoint, key_id=kms_key).wrap(new_key(), CONTEXT)
    assert "key provider aws-kms" in str(caught.value)


def test_no_region_is_a_clear_error_at_construction(
    tmp_path: Path, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, aws_env: None
) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(ProviderError, match=r"key provider aws-kms .*cannot be configured"):
        _provider(tmp_path, moto_endpoint, key_id="alias/x")
    assert _provider(tmp_path, moto_endpoint, key_id="alias/x", region="us-west-2").region == (
        "us-west-2"
    )


def test_a_profile_from_the_standard_aws_files_is_used(
    tmp_path: Path, moto_endpoint: str, kms_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials from boto3's own configuration (here ~/.aws-style files and a profile);
    the provider's settings carry only the profile's name."""
    credentials = tmp_path / "aws-credentials"
    credentials.write_text("[tkv]\naws_access_key_id = AKIDTKV\naws_secret_access_key = s\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    provider = _provider(tmp_path, moto_endpoint, key_id=kms_key, profile="tkv")
    key = new_key()
    assert provider.unwrap(provider.wrap(key, CONTEXT), CONTEXT).reveal() == key.reveal()
    with pytest.raises(ProviderError, match="cannot be configured"):
        _provider(tmp_path, moto_endpoint, key_id=kms_key, profile="no-such-profile")
