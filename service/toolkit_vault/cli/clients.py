"""`clients config --client claude-desktop|claude-code|vscode|cursor`: the entry that
points an MCP client at the vault, to paste into that client's own config file.

Without `--url` the client launches `toolkit-vault mcp` (stdio, the local principal: whoever
can read the vault home). With `--url` it reaches `serve`'s `/mcp` with an agent token,
and the token is always the client's own secret input, never a value in the file: VS Code
prompts for it (`${input:...}`, `password: true`) and keeps it in its secret storage;
Claude Code and Cursor read it from the environment when they start the connection
(`${TOOLKIT_VAULT_TOKEN}`, `${env:TOOLKIT_VAULT_TOKEN}`). Claude Desktop's config file has
no secret input, so it gets the stdio entry only.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any

import click

from toolkit_vault.cli.shell import epilog, guarded
from toolkit_vault.errors import VaultError

__all__ = ["client_entry", "clients"]

CLIENTS = ("claude-desktop", "claude-code", "vscode", "cursor")
NAME = "toolkit-vault"
TOKEN_VARIABLE = "TOOLKIT_VAULT_TOKEN"  # noqa: S105 (where the token is, not it)
_WHERE = {
    "claude-desktop": "claude_desktop_config.json (Settings > Developer > Edit Config)",
    "claude-code": ".mcp.json in the project (or `claude mcp add-json toolkit-vault '<entry>'`)",
    "vscode": ".vscode/mcp.json in the workspace (or the user's mcp.json)",
    "cursor": "~/.cursor/mcp.json (or .cursor/mcp.json in the project)",
}


@click.group(short_help="Configs that point MCP clients at the vault.")
def clients() -> None:
    """MCP clients (Claude Desktop, Claude Code, VS Code, Cursor) and the vault."""


@clients.command(
    "config",
    short_help="Print the entry that points an MCP client at the vault.",
    epilog=epilog(
        "toolkit-vault clients config --client claude-desktop",
        "toolkit-vault clients config --client vscode --url https://vault.example.com",
        "toolkit-vault clients config --client cursor --url http://127.0.0.1:8080",
        env=("TOOLKIT_VAULT_HOME",),
    ),
)
@click.option("--client", "client", type=click.Choice(CLIENTS), required=True)
@click.option("--url", default=None, help="serve's base URL: reach /mcp with an agent token")
@guarded
def config(client: str, url: str | None) -> None:
    """Print the entry for CLIENT's MCP config file (JSON on stdout; where it goes on
    stderr). The agent token is never printed: the client asks for it, or reads it from
    TOOLKIT_VAULT_TOKEN in its own environment (Claude Code, Cursor)."""
    click.echo(json.dumps(client_entry(client, url), indent=2))
    click.echo(f"paste into {_WHERE[client]}", err=True)


def client_entry(client: str, url: str | None) -> dict[str, Any]:
    """The entry for `client`: stdio (`toolkit-vault mcp`) without `url`, else `url`/mcp."""
    if url is None:
        return _stdio(client)
    if client == "claude-desktop":
        raise VaultError(
            "Claude Desktop's config file has no secret input for a token: use the stdio "
            "entry (no --url) on the vault's machine"
        )
    endpoint = url.rstrip("/") + "/mcp"
    if client == "vscode":
        token_input = {
            "type": "promptString",
            "id": "toolkit-vault-token",
            "description": "toolkit-vault agent token (tkv_...)",
            "password": True,
        }
        server = {
            "type": "http",
            "url": endpoint,
            "headers": {"Authorization": "Bearer ${input:toolkit-vault-token}"},
        }
        return {"inputs": [token_input], "servers": {NAME: server}}
    if client == "claude-code":
        header = f"Bearer ${{{TOKEN_VARIABLE}}}"
        return {
            "mcpServers": {
                NAME: {"type": "http", "url": endpoint, "headers": {"Authorization": header}}
            }
        }
    header = f"Bearer ${{env:{TOKEN_VARIABLE}}}"  # cursor
    return {"mcpServers": {NAME: {"url": endpoint, "headers": {"Authorization": header}}}}


def _stdio(client: str) -> dict[str, Any]:
    command = shutil.which("toolkit-vault") or os.path.abspath(sys.argv[0])
    server: dict[str, Any] = {"command": command, "args": ["mcp"]}
    home = os.environ.get("TOOLKIT_VAULT_HOME")
    if home:  # a path, not a secret: the client's process needs to find the vault
        server["env"] = {"TOOLKIT_VAULT_HOME": os.path.abspath(home)}
    if client == "vscode":
        return {"servers": {NAME: {"type": "stdio", **server}}}
    if client == "claude-code":
        return {"mcpServers": {NAME: {"type": "stdio", **server}}}
    return {"mcpServers": {NAME: server}}
