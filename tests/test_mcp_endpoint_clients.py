"""`clients config`: each client's entry points at the vault and never holds a token:
VS Code prompts for it as a password input, Claude Code and Cursor read it from the
environment, Claude Desktop gets the stdio entry only."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from toolkit_vault.cli import main


def entry(*args: str) -> dict[str, object]:
    done = CliRunner().invoke(main, ["clients", "config", *args])
    assert done.exit_code == 0, done.output
    loaded: dict[str, object] = json.loads(done.stdout)
    return loaded


def test_vscode_asks_for_the_token_as_a_password_input() -> None:
    made = entry("--client", "vscode", "--url", "https://vault.example/")
    assert made["inputs"] == [
        {
            "type": "promptString",
            "id": "toolkit-vault-token",
            "description": "toolkit-vault agent token (tkv_...)",
            "password": True,
        }
    ]
    assert made["servers"] == {
        "toolkit-vault": {
            "type": "http",
            "url": "https://vault.example/mcp",
            "headers": {"Authorization": "Bearer ${input:toolkit-vault-token}"},
        }
    }


@pytest.mark.parametrize(
    ("client", "reference"),
    [("claude-code", "${TOOLKIT_VAULT_TOKEN}"), ("cursor", "${env:TOOLKIT_VAULT_TOKEN}")],
)
def test_the_others_read_it_from_the_environment(client: str, reference: str) -> None:
    made = entry("--client", client, "--url", "https://vault.example")
    server = made["mcpServers"]["toolkit-vault"]  # type: ignore[index]
    assert server["url"] == "https://vault.example/mcp"
    assert server["headers"] == {"Authorization": f"Bearer {reference}"}


@pytest.mark.parametrize("client", ["claude-desktop", "claude-code", "vscode", "cursor"])
def test_without_a_url_the_client_launches_toolkit_vault_mcp(
    client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLKIT_VAULT_TOKEN", "tkv_not-to-be-printed")
    done = CliRunner().invoke(main, ["clients", "config", "--client", client])
    assert done.exit_code == 0 and "tkv_" not in done.output
    servers = json.loads(done.stdout)["servers" if client == "vscode" else "mcpServers"]
    assert servers["toolkit-vault"]["args"] == ["mcp"]


def test_claude_desktop_is_given_no_url_entry() -> None:
    done = CliRunner().invoke(
        main, ["clients", "config", "--client", "claude-desktop", "--url", "https://v.example"]
    )
    assert done.exit_code == 1 and "no secret input" in done.output
