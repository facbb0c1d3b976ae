"""`aws-kms`: the master key is an AWS KMS key; the vault only asks KMS to encrypt and
decrypt its 32-byte vault keys, with the wrap context as the KMS `EncryptionContext`.

KMS enforces the context (a blob decrypted under another context is refused) and logs it
in CloudTrail in clear, so every unwrap is attributable to what it was for. Credentials,
region and profile come from boto3's own standard configuration (environment, ~/.aws,
instance or task role), never from the vault's database; `region`, `profile` and
`endpoint_url` options only choose among them. Decrypt always names the configured key,
so a blob wrapped under any other KMS key is refused, even one the caller may use.

Rotation is KMS's on-demand rotation: the key id stays, new key material wraps from then
on, and KMS keeps every earlier material so older blobs still unwrap. Moving to another
KMS key is a provider migration: unwrap with one provider, wrap with the other.
"""

from __future__ import annotations

import logging
from typing import Any

from toolkit_vault.crypto import KEY_BYTES, SecretBytes
from toolkit_vault.errors import DecryptionError
from toolkit_vault.keys.providers.base import (
    Context,
    KeyProvider,
    ProviderError,
    ProviderSettings,
    ProviderStatus,
    check_context,
    checked_key,
    pack_blob,
    unpack_blob,
)

__all__ = ["SCHEME", "AwsKmsProvider", "KmsRefused", "encryption_context", "quiet_wire_logs"]

SCHEME = "aws-kms"
_OPAQUE = {"InvalidCiphertextException", "IncorrectKeyException"}
_MAX_CIPHERTEXT = 6144  # KMS's own limit on CiphertextBlob


class KmsRefused(ProviderError):
    """KMS answered with an error; `code` is KMS's error code (AccessDeniedException, ...)."""

    def __init__(self, provider: str, message: str, code: str) -> None:
        super().__init__(provider, message)
        self.code = code


class _NoDebug(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG


_NO_DEBUG = _NoDebug()


def quiet_wire_logs() -> None:
    """botocore logs every request and response body at DEBUG, and those of Encrypt and
    Decrypt hold the vault key in clear: drop botocore's DEBUG records, whatever level an
    operator sets (a filter on each botocore logger, and INFO on their parent)."""
    parent = logging.getLogger("botocore")
    if parent.getEffectiveLevel() < logging.INFO:
        parent.setLevel(logging.INFO)
    names = [n for n in logging.Logger.manager.loggerDict if n.split(".")[0] == "botocore"]
    for name in ["botocore", *names]:
        logger = logging.getLogger(name)
        if _NO_DEBUG not in logger.filters:
            logger.addFilter(_NO_DEBUG)


_loader: Any = None


def _botocore_session() -> Any:
    """A fresh botocore session sharing one loader of AWS's service models per process
    (parsing them is most of a client's start-up); credentials are still each session's."""
    global _loader
    import botocore.loaders
    import botocore.session

    if _loader is None:
        _loader = botocore.loaders.create_loader()
    session = botocore.session.get_session()
    session.register_component("data_loader", _loader)
    return session


def encryption_context(context: Context) -> dict[str, str]:
    """The KMS form of a wrap context: one entry per field, readable in CloudTrail."""
    fields = {f"tkv.{i}": str(part) for i, part in enumerate(check_context(context))}
    return {"toolkit-vault": "master-wrap/v1", **fields}


class AwsKmsProvider(KeyProvider):
    """Options: `key_id` (key id, ARN or alias; empty until `create_master_key`),
    `region`, `profile`, `endpoint_url` (a KMS-compatible endpoint, e.g. for tests)."""

    name = "aws-kms"
    option_names = ("key_id", "region", "profile", "endpoint_url")

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings)
        options = settings.options
        self.key_id = options.get("key_id") or None
        self.endpoint_url = options.get("endpoint_url") or None
        self._describe("(region unknown)")
        try:
            import boto3
            from botocore.config import Config
            from botocore.exceptions import BotoCoreError
        except ImportError:
            raise self.error(
                "boto3 is not installed: pip install 'toolkit-vault[aws-kms]'"
            ) from None
        config = Config(
            connect_timeout=5, read_timeout=15, retries={"mode": "standard", "max_attempts": 3}
        )
        try:
            session = boto3.session.Session(
                botocore_session=_botocore_session(),
                profile_name=options.get("profile") or None,
                region_name=options.get("region") or None,
            )
            self._client: Any = session.client("kms", endpoint_url=self.endpoint_url, config=config)
        except BotoCoreError as exc:  # NoRegionError, ProfileNotFound, bad endpoint URL
            raise self.error(f"cannot be configured: {exc}") from None
        self._describe(self._client.meta.region_name)
        self._arn: str | None = None
        quiet_wire_logs()  # after the client exists: its modules' loggers exist too

    def _describe(self, region: str) -> None:
        self.region = region
        at = f" at {self.endpoint_url}" if self.endpoint_url else ""
        self.where = f"AWS KMS key {self.key_id or '(none yet)'} in {region}{at}"

    def _call(self, operation: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            return getattr(self._client, operation)(**kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code, message = str(error.get("Code", "")), str(error.get("Message", ""))[:300]
            if operation == "decrypt" and code in _OPAQUE:
                raise DecryptionError from None
            refusal = self.error(f"refused {operation}: {code} {message}".rstrip())
            raise KmsRefused(self.name, refusal.message, code) from None
        except NoCredentialsError:
            raise self.error(
                "found no AWS credentials (set them as for any boto3 program: environment, "
                "~/.aws, or an instance role)"
            ) from None
        except BotoCoreError as exc:
            raise self.error(f"unreachable for {operation} ({type(exc).__name__})") from None

    def _key(self) -> str:
        if self.key_id is None:
            raise self.error("no KMS key is configured (the key_id option)")
        return self.key_id

    def key_arn(self) -> str:
        """The configured key's ARN (aliases resolved), asked of KMS once per provider."""
        if self._arn is None:
            self._arn = str(self._call("describe_key", KeyId=self._key())["KeyMetadata"]["Arn"])
        return self._arn

    def wrap(self, key: SecretBytes, context: Context) -> bytes:
        plaintext, fields = checked_key(key).reveal(), encryption_context(context)
        answer = self._call(
            "encrypt", KeyId=self._key(), Plaintext=plaintext, EncryptionContext=fields
        )
        return pack_blob(SCHEME, str(answer["KeyId"]), bytes(answer["CiphertextBlob"]))

    def unwrap(self, blob: bytes, context: Context) -> SecretBytes:
        scheme, arn, payload = unpack_blob(blob)
        fields = encryption_context(context)
        if scheme != SCHEME:
            raise self.foreign(scheme)
        if not 0 < len(payload) <= _MAX_CIPHERTEXT:
            raise DecryptionError
        if arn != self.key_arn():
            raise self.error(f"this key was wrapped under another KMS key, {arn}")
        try:
            answer = self._call(
                "decrypt", CiphertextBlob=payload, EncryptionContext=fields, KeyId=arn
            )
        except KmsRefused as exc:
            if exc.code == "AccessDeniedException" and self._can_decrypt(arn):
                raise DecryptionError from None  # the blob names a key it may not: altered
            raise
        plaintext = bytes(answer["Plaintext"])
        if answer.get("KeyId") != arn or len(plaintext) != KEY_BYTES:
            raise DecryptionError
        return SecretBytes(plaintext)

    def _can_decrypt(self, arn: str) -> bool:
        """Whether KMS lets us decrypt under `arn` at all. KMS answers AccessDenied both to
        a policy that forbids Decrypt and to a ciphertext whose key reference was altered;
        a probe round trip tells them apart (only on that failure path)."""
        probe = {"toolkit-vault": "access-probe"}
        try:
            sealed = self._call("encrypt", KeyId=arn, Plaintext=b"\0", EncryptionContext=probe)
            blob = sealed["CiphertextBlob"]
            self._call("decrypt", CiphertextBlob=blob, EncryptionContext=probe, KeyId=arn)
        except (ProviderError, DecryptionError):
            return False
        return True

    def status(self) -> ProviderStatus:
        if self.key_id is None:
            return ProviderStatus(self.name, self.where, None, ())
        meta = self._call("describe_key", KeyId=self.key_id)["KeyMetadata"]
        self._arn = str(meta["Arn"])
        rotations = self._call("list_key_rotations", KeyId=self._arn).get("Rotations", [])
        details = {"state": str(meta.get("KeyState")), "rotations": str(len(rotations))}
        return ProviderStatus(self.name, self.where, self._arn, (self._arn,), details)

    def create_master_key(self) -> str:
        """Create a symmetric KMS key for this vault; the caller records it as `key_id`."""
        if self.key_id is not None:
            raise self.error("a KMS key is already configured; rotate it instead")
        meta = self._call(
            "create_key",
            Description=f"toolkit-vault master key (vault {self.settings.vault_id})",
            KeyUsage="ENCRYPT_DECRYPT",
            KeySpec="SYMMETRIC_DEFAULT",
            Tags=[{"TagKey": "toolkit-vault:vault-id", "TagValue": self.settings.vault_id}],
        )["KeyMetadata"]
        self.key_id = self._arn = str(meta["Arn"])
        self._describe(self.region)
        return self.key_id

    def recorded_options(self) -> dict[str, str]:
        options = dict(self.settings.options)
        if self.key_id is not None:
            options["key_id"] = self.key_id
        return options

    def rotate(self) -> str:
        """KMS on-demand rotation: same key id, new key material for every later wrap."""
        self._call("rotate_key_on_demand", KeyId=self._key())
        return self.key_arn()

    def retire(self, key_id: str) -> None:
        raise self.error(
            "KMS keeps every earlier key material of a key and cannot drop one; once no "
            f"vault key is wrapped under {key_id}, schedule its deletion in KMS yourself"
        )
