"""Fail-closed classification: each rule on its own, with the reason it reports.

A rule is proven by a case only it decides: removing the rule flips that case's verdict.
"""

from __future__ import annotations

import pytest

from toolkit_package.classify import Evidence, classify, credential_word
from toolkit_package.imported import ConfigInput, one_field_per_name
from toolkit_package.placeholders import names, url_parts

CASES: list[tuple[Evidence, bool, str]] = [
    # the source's own marks
    (Evidence("X", marked="isSecret"), True, "isSecret"),
    (Evidence("PORT", marked="sensitive", value_type="number"), True, "sensitive"),
    (Evidence("x", marked="password input"), True, "password input"),
    # names and descriptions that say credential, however they are spelled
    (Evidence("RUNDECK_API_TOKEN"), True, "credential name: token"),
    (Evidence("ADFIN_PASSWORD"), True, "credential name: passw"),
    (Evidence("ALIBABA_CLOUD_ACCESS_KEY_SECRET"), True, "credential name: key"),
    (Evidence("X_GATEWAY_APIKEY"), True, "credential name: apikey"),
    (Evidence("VOLC_ACCESSKEY"), True, "credential name: accesskey"),
    (Evidence("myAuthCookie"), True, "credential name: auth"),
    (Evidence("SESSION_ID"), True, "credential name: session"),
    (Evidence("SSH_PRIVATE_KEY"), True, "credential name: private"),
    (Evidence("SENTRY_DSN"), True, "credential name: dsn"),
    (Evidence("DATABASE_URL"), True, "credential name: connection string"),
    (Evidence("NEO4J_URI"), True, "credential name: connection string"),
    (Evidence("GITHUB_PAT"), True, "credential name: pat"),
    (Evidence("API_KEY", marked_public="isSecret: false"), True, "credential name: key"),
    (
        Evidence("value", description="Your bearer token"),
        True,
        "credential description: bearer token",
    ),
    (
        Evidence("value", description="Connection string"),
        True,
        "credential description: connection string",
    ),
    # headers: secret unless harmless
    (Evidence("X-Custom", header=True), True, "header"),
    (Evidence("X-Tenant", header=True), False, "identifier or label: tenant"),
    (Evidence("X-Session-Id", header=True), True, "credential name: session"),
    (Evidence("Content-Type", header=True), False, "harmless header"),
    # where a placeholder sits in a URL
    (Evidence("user", url_part="userinfo"), True, "URL user-info"),
    (Evidence("k", url_part="query"), True, "URL query"),
    (Evidence("tenant", url_part="host"), False, "URL host"),
    # filling a secret value
    (Evidence("region", fills="isSecret"), True, "fills a secret (isSecret)"),
    # public only with evidence
    (Evidence("NODE_ENV"), False, "harmless name: env"),
    (Evidence("PORT"), False, "harmless name: port"),
    (Evidence("PYTHONPATH"), False, "harmless name: path"),
    (Evidence("verbose", value_type="boolean"), False, "boolean"),
    (Evidence("n", value_type="number"), False, "number"),
    (Evidence("workspace_x", path=True), False, "path"),
    (Evidence("flavour", choices=True), False, "choices"),
    (Evidence("TENANT", marked_public="isSecret: false"), False, "isSecret: false"),
    (Evidence("FLAVOUR_MAGIC"), True, "nothing shows it is public"),
    (Evidence("OPENAPI_MCP_HEADERS"), True, "nothing shows it is public"),
    (Evidence("HTTP_PROXY"), True, "nothing shows it is public"),
    # a setting about a credential is not the credential
    (Evidence("SSH_PRIVATE_PATH"), False, "setting of a credential: path"),
    (Evidence("SERVICENOW_AUTH_TYPE"), False, "setting of a credential: type"),
    (Evidence("MAX_NEW_TOKENS"), False, "setting of a credential: max"),
    (Evidence("AUTH_URL"), False, "setting of a credential: url"),
    (Evidence("SLACK_WEBHOOK_URL"), True, "credential name: webhook"),
    (Evidence("AWS_ACCESS_KEY_ID"), True, "credential name: key"),
    (Evidence("JIRA_PROJECT_KEY"), False, "setting of a credential: project key"),
    (Evidence("GOOGLE_OAUTH_CLIENT_ID"), False, "setting of a credential: id"),
    (Evidence("GOOGLE_OAUTH_CLIENT_SECRET"), True, "credential name: auth"),
    (Evidence("DEFAULT_TOKEN"), True, "credential name: token"),
    (Evidence("REDIS_URL"), True, "credential name: connection string"),
    (Evidence("VDB_API_URL"), False, "harmless name: url"),
    (Evidence("SEED_PHRASE"), True, "nothing shows it is public"),
    (
        Evidence("HOME_ASSISTANT", description="a long-lived access token"),
        True,
        "credential description: access token",
    ),
    # switches, well-known variables, example values, identifiers and labels
    (Evidence("ALLOW_SHELL_COMMANDS"), False, "harmless name: allow"),
    (Evidence("NO_COLOR"), False, "harmless name: no"),
    (Evidence("PYTHONUNBUFFERED"), False, "well-known variable: PYTHONUNBUFFERED"),
    (Evidence("DEFAULT_TTL_SECONDS"), False, "harmless name: seconds"),
    (Evidence("GITEE_API_BASE"), False, "harmless name: base"),
    (Evidence("ELEVENLABS_BOOST", description="0.75"), False, "number value"),
    (Evidence("MONGO", description="mongodb://u:p@h/db"), True, "URL user-info"),
    (Evidence("AUTHOR_NAME"), False, "identifier or label: name"),
    (Evidence("GOOGLE_CLIENT_ID"), False, "identifier or label: id"),
    (Evidence("COLLECTION_NAME"), False, "identifier or label: name"),
    (
        Evidence("TENANT", description="your access token"),
        True,
        "credential description: access token",
    ),
    # arguments named by their flag and value
    (Evidence("-e DART_TOKEN"), False, "passes DART_TOKEN by name"),
    (Evidence("-e NOMAD_TOKEN=secret-token"), True, "credential name: token"),
    (Evidence("--key-file /path/to/key.json"), False, "setting of a credential: file"),
    (Evidence("--token YOUR_TOKEN"), True, "credential name: token"),
    (Evidence("--automaticAuthentication true"), False, "boolean value"),
    (Evidence("postgresql://admin:pw@db/x"), True, "URL user-info"),
    # a client config's literal value, seen for its shape only
    (Evidence("UPSTREAM", literal="https://u:p@db.example/x"), True, "URL user-info"),
    (Evidence("UPSTREAM", literal="https://h.example/?api_key=abc"), True, "URL query"),
    (Evidence("UPSTREAM", literal="https://h.example/v1"), False, "URL value"),
    (Evidence("BINS", literal="1000"), False, "number value"),
    (Evidence("FLAG", literal="false"), False, "boolean value"),
    (Evidence("WHERE", literal="/srv/data"), False, "path value"),
    (Evidence("FLAVOUR", literal="production"), True, "nothing shows it is public"),
    (Evidence("PORTAL", literal="ghp_0123456789abcdefghij"), True, "a value shaped like a token"),
    (Evidence("LOG_DIR", literal="xoxb-1-2"), True, "a value shaped like a token"),
    (Evidence("STRIPE_KEY", literal="1234"), True, "credential name: key"),
]


@pytest.mark.parametrize(("evidence", "secret", "reason"), CASES)
def test_each_rule_and_its_reason(evidence: Evidence, secret: bool, reason: str) -> None:
    verdict = classify(evidence)
    assert (verdict.secret, verdict.reason) == (secret, reason)


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("AUTHORIZATION", "auth"),
        ("oauth_client", "auth"),
        ("AUTHOR", None),
        ("authors list", None),
        ("KEYWORDS", None),
        ("MONKEY_MODE", None),
        ("PASSPORT_NO", None),
        ("Max tokens to generate", None),
        ("TOKEN_FILE_PATH", None),
        ("ACCESS_TOKEN", "token"),
    ],
)
def test_credential_words_are_words(text: str, word: str | None) -> None:
    assert credential_word(text) == word


def test_placeholders_and_url_parts() -> None:
    assert names("--token={token} ${API_KEY} ${input:ws} ${env:HOME} <NOT>") == [
        "token",
        "API_KEY",
        "ws",
        "HOME",
    ]
    url = "https://{user}:{pw}@{tenant}.example.com/{path}/x?key=<YOUR_TOKEN>&q={q}"
    assert url_parts(url) == {
        "user": "userinfo",
        "pw": "userinfo",
        "tenant": "host",
        "path": "path",
        "YOUR_TOKEN": "query",
        "q": "query",
    }


def test_one_input_is_one_field_and_secret_wins() -> None:
    def item(kind: str, secret: bool, fixed: bool, argv: bool) -> ConfigInput:
        reason = "credential name: key" if secret else "harmless name: port"
        return ConfigInput("K", "", False, secret, kind, f"/{kind}", fixed, argv, reason=reason)  # type: ignore[arg-type]

    (merged,) = one_field_per_name(
        [item("variable", False, True, True), item("env", True, False, False)]
    )
    assert (merged.kind, merged.secret, merged.in_argv, merged.has_fixed_value) == (
        "env",
        True,
        True,
        False,
    )
    assert merged.reason == "credential name: key" and merged.location == "/env"
