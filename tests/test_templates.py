"""Environment templates (issue 41): an operator's named public values per toolkit, checked
against the schema when set, kept in the verified audit chain; a configure naming one sends
only the secrets and stores what the full config stores. Service API, A2E and the command
line, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select, update
from starlette.testclient import TestClient

from cli_support import run_cli
from toolkit_package.selection import Selection
from toolkit_vault.access.principals import Principal, create_token, list_principals
from toolkit_vault.audit.history import history
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.core.connection import connect
from toolkit_vault.core.intake import Intake
from toolkit_vault.core.templates import (
    TemplateNotFound,
    get_template,
    list_templates,
    remove_template,
    set_template,
    skeleton_of,
)
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import ConfigInvalid
from toolkit_vault.protocol import ToolkitConfigureRequest
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.ledger import StateUnknown
from toolkit_vault.store.models import AuditEvent
from toolkit_vault.toolkits.imports import import_package
from toolkit_vault.transports.http_api import create_app

from tkv_test_plugins import SecretiveToolkit

AGENT = Principal("local", "agent")
CANARY = "tkv-canary-template-5a0c"
PROD = {"endpoint": "https://prod.example.test", "mode": "ok", "auth": {"user": "svc"}}


class Agent:
    def __init__(self, vault: Vault) -> None:
        self.conn = connect(vault, AGENT)
        hello = self.send({"type": "handshake/req", "capabilities": ["toolkits"]})
        self.session_id = hello["session_id"]

    def send(self, message: dict[str, Any]) -> dict[str, Any]:
        return dict(json.loads(self.conn.handle_raw(json.dumps(message))[0]))

    def configure(self, config: dict[str, Any], **extra: Any) -> dict[str, Any]:
        request = {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config}
        return self.send({**request, **extra})


def test_a_configure_naming_a_template_stores_what_the_full_config_stores(vault: Vault) -> None:
    set_template(vault.store, "operator", vault.toolkit("secretive"), "prod", PROD)
    by_template, full = Agent(vault), Agent(vault)
    answer = by_template.configure({"api_key": CANARY}, template="prod")
    assert answer["status"] == "ok", answer
    received_by_template = SecretiveToolkit.received[-1]
    assert full.configure({**PROD, "api_key": CANARY})["status"] == "ok"
    assert received_by_template == SecretiveToolkit.received[-1] == {**PROD, "api_key": CANARY}
    (mine,) = history(vault.store, by_template.session_id)
    (theirs,) = history(vault.store, full.session_id)
    for key in ("public_config", "status", "schema_digest"):
        assert mine[key] == theirs[key], key
    assert list(mine["secret_fingerprints"]) == list(theirs["secret_fingerprints"]) == ["/api_key"]
    assert mine["public_config"] == PROD


def test_a_template_is_checked_against_the_schema_when_set(vault: Vault) -> None:
    toolkit = vault.toolkit("secretive")
    refusals = [
        ({"api_key": CANARY}, {"pointer": "/api_key", "keyword": "x-template-secret"}),
        ({"tokens": [CANARY]}, {"pointer": "/tokens", "keyword": "x-template-secret"}),
        ({"headers": {"X": CANARY}}, {"pointer": "/headers", "keyword": "x-template-secret"}),
        ({"nope": CANARY}, {"pointer": "/nope", "keyword": "x-template-undeclared"}),
        ({"endpoint": 5}, {"pointer": "/endpoint", "keyword": "type"}),
        ({"mode": CANARY}, {"pointer": "/mode", "keyword": "enum"}),
    ]
    for values, detail in refusals:
        with pytest.raises(ConfigInvalid) as refused:
            set_template(vault.store, "operator", toolkit, "prod", values)
        assert detail in refused.value.details, values
        assert CANARY not in repr(refused.value.details) + refused.value.message
    assert list_templates(vault.store) == {}
    with pytest.raises(Exception, match="template name"):
        set_template(vault.store, "operator", toolkit, "Prod env", PROD)


def test_the_template_decides_and_a_removed_one_is_refused(vault: Vault) -> None:
    set_template(vault.store, "operator", vault.toolkit("secretive"), "prod", PROD)
    agent = Agent(vault)
    clash = agent.configure({"endpoint": "https://evil.test", "api_key": CANARY}, template="prod")
    assert clash["type"] == "error"
    assert clash["details"] == [{"pointer": "/endpoint", "keyword": "x-template"}]
    same = agent.configure({"endpoint": PROD["endpoint"], "api_key": CANARY}, template="prod")
    assert same["status"] == "ok"
    remove_template(vault.store, "operator", "secretive", "prod")
    gone = agent.configure({"api_key": CANARY}, template="prod")
    assert gone["type"] == "error" and "no template 'prod'" in gone["message"]
    assert len(history(vault.store, agent.session_id)) == 1
    with pytest.raises(TemplateNotFound):
        get_template(vault.store, "secretive", "prod")


def test_an_edited_template_event_is_not_believed(vault: Vault, home: VaultSettings) -> None:
    set_template(vault.store, "operator", vault.toolkit("secretive"), "prod", PROD)
    forged = json.dumps({"name": "prod", "values": {**PROD, "endpoint": "https://evil.test"}})
    with vault.store.engine.begin() as db:
        db.execute(
            update(AuditEvent).where(AuditEvent.action == "template_set").values(details=forged)
        )
    fresh = open_vault(home, current=False)  # as another process would open it
    try:
        with pytest.raises(StateUnknown):
            get_template(fresh.store, "secretive", "prod")
    finally:
        fresh.store.engine.dispose()


def test_a_spec_only_client_sees_no_template_field() -> None:
    dumped = ToolkitConfigureRequest(toolkit_name="x", config={}).model_dump(by_alias=True)
    assert "template" not in dumped


def test_the_command_line(vault: Vault, cli_env: dict[str, str]) -> None:
    def cli(*args: str) -> Any:
        return run_cli(("templates", *args), cli_env, timeout=60)

    made = cli("set", "secretive", "prod", "endpoint=https://prod.example.test", "mode=ok")
    assert made.returncode == 0, made.stderr
    shown = cli("show", "secretive", "prod", "--json")
    assert json.loads(shown.stdout)["values"] == {
        "endpoint": "https://prod.example.test",
        "mode": "ok",
    }
    refused = cli("set", "secretive", "dev", f"api_key={CANARY}")
    assert refused.returncode == 1 and "/api_key (x-template-secret)" in refused.stderr
    assert CANARY not in refused.stderr + refused.stdout
    listed = json.loads(cli("list", "--json").stdout)
    assert list(listed["templates"]["secretive"]) == ["prod"]
    assert cli("remove", "secretive", "prod").returncode == 0
    assert json.loads(cli("list", "--json").stdout) == {"templates": {}}
    printed = run_cli(("toolkits", "template", "secretive", "--format", "env"), cli_env, timeout=60)
    assert printed.returncode == 0 and "API_KEY=\n" in printed.stdout
    assert list_templates(vault.store) == {}


def test_the_v1_routes(vault: Vault, home: VaultSettings) -> None:
    operator = {"Authorization": f"Bearer {create_token(vault.store, 'operator', 'ops')[1]}"}
    agent = {"Authorization": f"Bearer {create_token(vault.store, 'agent', 'bot')[1]}"}
    with TestClient(create_app(vault, open_provider(home)), base_url="https://testserver") as c:
        url = "/v1/templates/secretive/prod"
        assert c.put(url, json={"values": PROD}, headers=agent).status_code == 403
        made = c.put(url, json={"values": PROD}, headers=operator)
        assert made.status_code == 200 and made.json()["values"] == PROD
        secret = c.put(url, json={"values": {"api_key": CANARY}}, headers=operator)
        assert secret.status_code == 422 and CANARY not in secret.text
        assert secret.json()["details"] == [{"pointer": "/api_key", "keyword": "x-template-secret"}]
        assert c.get(url, headers=operator).json()["values"] == PROD  # the refusal changed nothing
        listed = c.get("/v1/templates", params={"toolkit": "secretive"}, headers=operator)
        assert listed.json() == {"templates": {"secretive": {"prod": PROD}}}
        assert (
            c.put("/v1/templates/nope/prod", json={"values": {}}, headers=operator).status_code
            == 404
        )
        assert c.delete(url, headers=operator).json()["removed"] is True
        assert c.get(url, headers=operator).status_code == 404
    trail = [row.actor for row in history_events(vault)]
    assert trail.count(made_by(vault, "ops")) == 2  # set and removed, as the signed-in operator


def history_events(vault: Vault) -> list[Any]:
    actions = ["template_set", "template_removed"]
    with vault.store.engine.connect() as db:
        return list(db.execute(select(AuditEvent.actor).where(AuditEvent.action.in_(actions))))


def made_by(vault: Vault, name: str) -> str:
    return next(p.principal_id for p in list_principals(vault.store) if p.name == name)


# What each field of `secretive` must be once its skeleton is imported back.
# `auth` declares its members: each is its own input, the public one public.
SECRET_FIELDS = {"api_key": True, "auth_password": True, "tokens": True, "headers": True}
PUBLIC_FIELDS = {"endpoint": False, "mode": False, "auth_user": False}


@pytest.mark.parametrize("fmt", ["vscode", "mcpb"])
def test_a_skeleton_imports_back_with_every_secret_field_still_secret(
    vault: Vault, fmt: str
) -> None:
    set_template(vault.store, "operator", vault.toolkit("secretive"), "prod", PROD)
    text = skeleton_of(vault.toolkit("secretive"), fmt)
    for value in (PROD["endpoint"], "svc", CANARY):  # no template value, default or secret
        assert value not in text
    doc = json.loads(text)
    if fmt == "vscode":
        assert {i["id"]: i["password"] for i in doc["inputs"]} == SECRET_FIELDS | PUBLIC_FIELDS
    else:
        marks = {k: v["sensitive"] for k, v in doc["user_config"].items()}
        assert marks == SECRET_FIELDS | PUBLIC_FIELDS
    renamed = f"secretive-{fmt}"
    selection = Selection(rename={"secretive": renamed})
    import_package(vault.store, vault.registry, text.encode(), "local", selection)
    imported = vault.toolkit(renamed).definition.config_schema["properties"]
    secret_by_source = {
        prop["x-toolkit-input"]["name"]: prop.get("writeOnly") is True for prop in imported.values()
    }
    assert secret_by_source == {
        ("API_KEY" if fmt == "vscode" else "api_key"): True,
        ("AUTH_PASSWORD" if fmt == "vscode" else "auth_password"): True,
        ("AUTH_USER" if fmt == "vscode" else "auth_user"): False,
        ("TOKENS" if fmt == "vscode" else "tokens"): True,
        ("HEADERS" if fmt == "vscode" else "headers"): True,
        ("ENDPOINT" if fmt == "vscode" else "endpoint"): False,
        ("MODE" if fmt == "vscode" else "mode"): False,
    }


def test_env_and_json_skeletons_hold_placeholders_only(vault: Vault) -> None:
    env = skeleton_of(vault.toolkit("secretive"), "env")
    assert "# api_key (secret, required)\nAPI_KEY=\n" in env and "# endpoint (required)" in env
    assert "# auth.password (secret)\nAUTH_PASSWORD=\n" in env and "# auth.user\n" in env
    request = json.loads(skeleton_of(vault.toolkit("secretive"), "json"))
    assert request["config"]["api_key"] == "${API_KEY}"
    assert request["config"]["auth"] == {"user": "${AUTH_USER}", "password": "${AUTH_PASSWORD}"}
    assert ToolkitConfigureRequest.model_validate(request).toolkit_name == "secretive"


def test_an_intake_link_for_a_template_asks_only_for_the_secrets(vault: Vault) -> None:
    key = SecretBytes(b"t" * 32)
    vault.intake = intake = Intake(vault, key, lambda link: f"https://vault.test/i?link={link}")
    set_template(vault.store, "operator", vault.toolkit("secretive"), "prod", PROD)
    asked = Agent(vault).configure({}, template="prod", intake=True)
    assert asked["status"] == "partial", asked
    view = intake.open(asked["intake_url"].partition("?link=")[2])
    assert view.public_config == PROD  # the person is asked for the secrets only
    outcome = intake.complete(
        asked["intake_url"].partition("?link=")[2], {**PROD, "api_key": CANARY}
    )
    assert outcome.status == "ok" and SecretiveToolkit.received[-1] == {**PROD, "api_key": CANARY}


def test_an_imported_servers_skeleton_carries_its_command(vault: Vault) -> None:
    """The command line an import kept (`npx -y ...`) is the skeleton's, not a placeholder;
    its variables are inputs, secret ones secret, and no value of the import is in it."""
    config = {
        "mcpServers": {
            "everything": {
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-everything"],
                "env": {"API_TOKEN": CANARY, "REGION": "eu-west-9"},
            }
        }
    }
    import_package(vault.store, vault.registry, json.dumps(config).encode(), "local", Selection())
    toolkit = vault.toolkit("everything")
    vscode = json.loads(skeleton_of(toolkit, "vscode"))
    server = vscode["servers"]["everything"]
    assert (server["command"], server["args"]) == (
        "npx",
        ["-y", "@modelcontextprotocol/server-everything"],
    )
    assert {i["id"]: i["password"] for i in vscode["inputs"]} == {
        "api_token": True,
        "region": False,
    }
    assert server["env"] == {"API_TOKEN": "${input:api_token}", "REGION": "${input:region}"}
    mcpb = json.loads(skeleton_of(toolkit, "mcpb"))["server"]
    assert mcpb["entry_point"] == "npx" and mcpb["mcp_config"]["args"] == server["args"]
    for text in (skeleton_of(toolkit, fmt) for fmt in ("vscode", "mcpb", "env", "json")):
        assert CANARY not in text and "eu-west-9" not in text
        assert "REPLACE-WITH-THE-SERVER-COMMAND" not in text
    plain = json.loads(skeleton_of(vault.toolkit("secretive"), "vscode"))
    assert plain["servers"]["secretive"]["command"] == "REPLACE-WITH-THE-SERVER-COMMAND"
