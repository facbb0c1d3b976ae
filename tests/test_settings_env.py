"""The `TOOLKIT_VAULT_*` environment, read without pydantic-settings (issue 53): each
variable parses as it did under pydantic-settings (the words a boolean takes, numbers,
paths, names in any case), and a value that does not parse is one clear error naming the
variable, never its value."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import VaultError
from toolkit_vault.settings import EnvSettings, oidc_settings

TRUE_WORDS = ["1", "on", "t", "true", "y", "yes", "TRUE", "On", "Yes"]
FALSE_WORDS = ["0", "off", "f", "false", "n", "no", "FALSE", "Off", "No"]


def test_nothing_set_is_every_default() -> None:
    assert EnvSettings.from_environment({"PATH": "/bin", "HOME": "/root"}) == EnvSettings()
    assert EnvSettings().home == Path("./var") and EnvSettings().metrics is True


@pytest.mark.parametrize("word", TRUE_WORDS + FALSE_WORDS)
def test_a_boolean_takes_the_words_it_took_before(word: str) -> None:
    read = EnvSettings.from_environment({"TOOLKIT_VAULT_METRICS": word})
    assert read.metrics is (word in TRUE_WORDS)
    fail_closed = EnvSettings.from_environment({"TOOLKIT_VAULT_AUDIT_FAIL_CLOSED": word})
    assert fail_closed.audit_fail_closed is (word in TRUE_WORDS)


@pytest.mark.parametrize("word", ["", " true", "maybe", "2", "1.0", "hunter2-secret"])
def test_a_boolean_that_is_not_one_is_named_without_its_value(word: str) -> None:
    for name in ("METRICS", "AUDIT_FAIL_CLOSED", "OTEL_TRACES"):
        with pytest.raises(VaultError) as caught:
            EnvSettings.from_environment({f"TOOLKIT_VAULT_{name}": word})
        assert str(caught.value) == (
            f"TOOLKIT_VAULT_{name} must be true or false (or on/off, yes/no, 1/0)"
        )


def test_numbers_paths_and_strings() -> None:
    read = EnvSettings.from_environment(
        {
            "TOOLKIT_VAULT_OIDC_SESSION_MINUTES": " 1e2 ",
            "TOOLKIT_VAULT_HOME": "~/vault",
            "TOOLKIT_VAULT_OIDC_CLIENT_SECRET_FILE": "/run/secret",
            "TOOLKIT_VAULT_DATABASE_URL": "",
            "TOOLKIT_VAULT_AUDIT_DEVICES": "stdout,none",
        }
    )
    assert read.oidc_session_minutes == 100.0 and read.home == Path("~/vault")
    assert read.oidc_client_secret_file == Path("/run/secret")
    assert read.database_url == "" and read.audit_devices == "stdout,none"
    with pytest.raises(VaultError, match=r"^TOOLKIT_VAULT_OIDC_SESSION_MINUTES must be a number$"):
        EnvSettings.from_environment({"TOOLKIT_VAULT_OIDC_SESSION_MINUTES": "hunter2"})


def test_a_name_matches_in_any_case_and_other_names_are_ignored() -> None:
    read = EnvSettings.from_environment(
        {"toolkit_vault_key_provider": "file", "Toolkit_Vault_Metrics": "off", "TOOLKIT_X": "1"}
    )
    assert read.key_provider == "file" and read.metrics is False
    assert EnvSettings.from_environment({"TOOLKIT_VAULT_NOT_A_SETTING": "x"}) == EnvSettings()


def test_the_client_secret_is_hidden_and_reaches_the_oidc_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read = EnvSettings.from_environment({"TOOLKIT_VAULT_OIDC_CLIENT_SECRET": "hunter2"})
    assert isinstance(read.oidc_client_secret, SecretBytes)
    assert "hunter2" not in repr(read) and "hunter2" not in str(read)
    monkeypatch.setenv("TOOLKIT_VAULT_OIDC_ISSUER", "https://id.example.com")
    monkeypatch.setenv("TOOLKIT_VAULT_OIDC_CLIENT_ID", "vault")
    monkeypatch.setenv("TOOLKIT_VAULT_OIDC_CLIENT_SECRET", "hunter2")
    monkeypatch.setenv("TOOLKIT_VAULT_OIDC_SESSION_MINUTES", "30")
    oidc = oidc_settings()
    assert oidc is not None and oidc.client_secret is not None
    assert oidc.client_secret.reveal() == b"hunter2" and oidc.session_lifetime == 30 * 60
    monkeypatch.setenv("TOOLKIT_VAULT_OIDC_CLIENT_SECRET", "")  # set but empty: a public client
    oidc = oidc_settings()
    assert oidc is not None and oidc.client_secret is None
