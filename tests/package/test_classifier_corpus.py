"""The classifier measured against hand labels of the real corpus (tests/fixtures/mcp_labels.json).

Every configurable field of every file in tests/fixtures/mcp is labelled secret (its value is a
credential) or public, by people, apart from the classifier. The bar: every credential secret
(recall 1.0: fail closed stays the rule) and at most 5% of the harmless settings secret. The
figures are printed (`pytest -s`) and the misclassified public fields listed by name.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from corpus import CORPUS, corpus

from toolkit_package.classify import Evidence, Verdict, classify
from toolkit_package.imported import ConfigInput

LABELS = CORPUS.parent / "mcp_labels.json"
MAX_FALSE_SECRET_SHARE = 0.05

Key = tuple[str, str, str, str]  # file, server, location, field


def labels() -> dict[Key, dict[str, Any]]:
    rows = json.loads(LABELS.read_text())["fields"]
    table = {(r["file"], r["server"], r["location"], r["field"]): r for r in rows}
    assert len(table) == len(rows), "one label per field"
    assert {r["label"] for r in rows} <= {"secret", "public"}
    return table


def classified(*, fixed: bool = False) -> dict[Key, ConfigInput]:
    """Every configurable input of the corpus; with ``fixed``, the inputs the package fixes
    too (an argument it passes itself: secret when a credential ends up on the command line)."""
    out = {}
    for path, result in corpus():
        for server in result.servers:
            for item in server.inputs if fixed else server.configurable:
                key = (str(path.relative_to(CORPUS)), server.name, item.location, item.name)
                assert key not in out, key
                out[key] = item
    return out


def figures(*, fixed: bool = False) -> tuple[int, int, int, int, list[str], list[str]]:
    truth, seen = labels(), classified(fixed=fixed)
    if not fixed:
        truth = {k: r for k, r in truth.items() if not r.get("fixed")}
    assert set(truth) == set(seen), "every field is labelled, no label is stale"
    credentials = [k for k, r in truth.items() if r["label"] == "secret"]
    harmless = [k for k, r in truth.items() if r["label"] == "public"]
    missed = [
        f"{k[1]}: {seen[k].name} ({seen[k].reason})" for k in credentials if not seen[k].secret
    ]
    false = [f"{k[1]}: {seen[k].name} ({seen[k].reason})" for k in harmless if seen[k].secret]
    return (
        len(credentials),
        len(credentials) - len(missed),
        len(harmless),
        len(false),
        missed,
        false,
    )


@pytest.mark.parametrize("fixed", [False, True], ids=["configurable", "with-fixed-arguments"])
def test_every_credential_is_secret_and_few_harmless_settings_are(
    fixed: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    n_cred, caught, n_harmless, n_false, missed, false = figures(fixed=fixed)
    recall = caught / n_cred
    share = n_false / n_harmless
    what = "fields, fixed arguments included" if fixed else "configurable fields"
    with capsys.disabled():
        print(
            f"\nclassifier on the labelled corpus: {n_cred + n_harmless} {what}; "
            f"credentials {caught}/{n_cred} secret (recall {recall:.3f}); "
            f"harmless settings secret {n_false}/{n_harmless} ({share:.1%})"
        )
        for line in false:
            print(f"  false secret: {line}")
    assert missed == [] and recall == 1.0
    assert share <= MAX_FALSE_SECRET_SHARE
    assert n_cred >= 200 and n_harmless >= 200


def test_every_decision_keeps_its_reason() -> None:
    for item in classified().values():
        assert item.reason, item.name


@pytest.mark.parametrize(
    "name", ["NO_COLOR", "PYTHONUNBUFFERED", "SHELL", "DEFAULT_TTL_SECONDS", "COLLECTION_NAME"]
)
def test_the_issues_harmless_settings_are_public_in_the_corpus(name: str) -> None:
    found = [i for i in classified().values() if i.name == name]
    assert found and all(not i.secret for i in found), name


def test_a_publishers_not_secret_is_not_overturned_by_description_words() -> None:
    tenant = Evidence(
        "TENANT_ID",
        description="The tenant used to request an access token",
        marked_public="isSecret: false",
    )
    assert classify(tenant) == Verdict(False, "isSecret: false")
    endpoint = Evidence(
        "login-endpoint", description="Where the password is sent", marked_public="isSecret: false"
    )
    assert not classify(endpoint).secret
    # ... but the name still wins: no credential may ever be public
    assert classify(Evidence("API_KEY", marked_public="isSecret: false")).secret


def test_the_labels_are_sourced() -> None:
    assert "mcp_labels.json" in (CORPUS / "SOURCES.md").read_text()
