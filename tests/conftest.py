"""Fixtures: a real vault home on real SQLite and real PostgreSQL, same tests for both, with
its master key in a real key provider.

PostgreSQL is required: when it is unreachable the PostgreSQL half of the suite fails
(it is never skipped silently). Set TOOLKIT_VAULT_TEST_POSTGRES_URL to point elsewhere.

Key providers: the `home` fixture's master key is in the `file` provider, AWS KMS (moto's
server on loopback) or PKCS#11 (a SoftHSM2 token), all real and started here. A module that
is about keys runs every test with each (`pytestmark = pytest.mark.key_providers(...)`);
every other module gets one, fixed per module (a hash of its name), so the suite as a whole
runs on all three. `TOOLKIT_VAULT_TEST_KEY_PROVIDER=aws-kms` runs every other module on one.

Logs: every `serve` and `stdio` the suite starts copies every log record it makes (every
level, every logger) to a directory of the session's (`TOOLKIT_VAULT_LOG_COPY`, made by the
controller, inherited by xdist workers and their commands); at the end the controller scans
it (`log_scan`) and fails the run if any holds a canary or a noted secret.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import sys
import tempfile
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from toolkit_vault import logs
from toolkit_vault.bootstrap import init_vault, open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.store.database import migrate, open_engine

PLUGINS = Path(__file__).parent / "plugins"
sys.path.insert(0, str(PLUGINS))  # the test plugins' dist-info makes their entry points real
sys.path.insert(0, str(Path(__file__).parent / "providers"))  # provider_support
SPEC_PLUGINS = PLUGINS / "spec_dist"  # a separate distribution, installed only where asked

from provider_support import (  # noqa: E402
    SOFTHSM_MODULE,
    TOKEN_LABEL,
    USER_PIN,
    MotoServer,
    copy_softhsm_token,
    make_softhsm_token,
)

import postgres_support  # noqa: E402
from log_scan import note_secrets, scan  # noqa: E402

if TYPE_CHECKING:
    from oauth_server import AuthServer
    from toolkit_vault.mcp_client import UpstreamHost

KEY_PROVIDERS = ("file", "aws-kms", "pkcs11")
FORCED_PROVIDER = os.environ.get("TOOLKIT_VAULT_TEST_KEY_PROVIDER")

POSTGRES_URL = os.environ.get(
    "TOOLKIT_VAULT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def module_provider(module: str) -> str:
    """The key provider a module's vaults use when it does not ask for several."""
    return KEY_PROVIDERS[zlib.crc32(module.encode()) % len(KEY_PROVIDERS)]


LOG_COPY = "TOOLKIT_VAULT_LOG_COPY"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "key_providers(*names): run the home fixture's vault with each key provider"
    )
    config.addinivalue_line(
        "markers",
        "one_database: the module tests what sits above the store (a client, a protocol, a "
        "page), so its vaults run on SQLite only; storage and adversarial tests keep both",
    )
    if not hasattr(config, "workerinput"):  # the controller (or the one process, -n 0)
        os.environ[LOG_COPY] = tempfile.mkdtemp(prefix="tkv-log-copy-")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """On the controller, once every worker is done: scan the log copies (`log_scan`); any
    canary or noted secret fails the run, named by file and line (never shown)."""
    directory = os.environ.get(LOG_COPY)
    if hasattr(session.config, "workerinput") or not directory or not os.path.isdir(directory):
        return
    findings = scan(directory)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if not findings:
        shutil.rmtree(directory, ignore_errors=True)
        return
    lines = [f"log canary scan: {len(findings)} secret(s) in serve/stdio logs:", *findings[:50]]
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line, file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


QUICK = os.environ.get("TKV_QUICK") == "1"  # scripts/test --quick
SAMPLED_AXES = ("database_url", "key_provider")
HEAVY_MARKS = ("browser", "soak", "kill")  # what `scripts/test --quick` leaves out, with slow


# Tests over about seven seconds alone on a 2-core machine (the durations table in
# docs/testing.md), besides the browser, soak and kill ones: `slow`, out of the quick loop.
SLOW = frozenset(
    {
        "tests/adversarial/test_concurrency.py::test_eight_processes_configure_without_losing_a_write",
        "tests/adversarial/test_key_refusals.py::test_insecure_keyrings_are_refused_and_nothing_is_generated",
        "tests/package/test_corpus_imports.py::test_more_than_one_mebibyte_imports_and_the_bulk_bound_holds",
        "tests/package/test_import_canaries.py::test_no_canary_of_an_imported_secret_field_is_stored_or_shown",
        "tests/package/test_toolkits_commands.py::test_show_gives_each_field_its_mark_and_reason",
        "tests/test_allowances.py::test_the_command_line",
        "tests/test_audit_devices.py::test_serve_reopens_its_audit_file_on_sighup_and_writes_stdout",
        "tests/test_audit_trail.py::test_every_action_shows_in_the_cli_the_api_and_the_console_with_its_actor",
        "tests/test_http_app.py::test_openapi_finds_no_server_error",
        "tests/test_import_oauth.py::test_the_cli_reports_oauth_and_no_discover_asks_nothing",
        "tests/test_key_hierarchy.py::test_a_server_follows_rotations_made_elsewhere_without_a_false_alarm",
        "tests/test_key_hierarchy.py::test_an_outage_after_a_rotation_elsewhere_fails_alone",
        "tests/test_key_hierarchy.py::test_an_outage_after_start_stops_no_configure_list_or_resume",
        "tests/test_live_registry.py::test_a_running_server_sees_an_import_a_reimport_and_a_removal_made_elsewhere",
        "tests/test_mcp_endpoint_npm.py::test_the_inspector_cli_over_stdio",
        "tests/test_recovery.py::test_a_backup_restores_with_shares_when_the_master_key_and_the_database_are_gone",
        "tests/test_rotation.py::test_master_rotation_rewraps_the_vault_keys_only",
        "tests/test_rotation.py::test_rotate_master_key_script",
        "tests/test_upgrade.py::test_a_broken_chain_stops_the_upgrade",
        "tests/test_upgrade.py::test_a_legacy_vault_upgrades_with_nothing_lost",
        "tests/test_upgrade.py::test_the_upgrade_resumes_and_signs_nothing_it_cannot_vouch_for",
        "tests/test_verify_deadline.py::test_drip_checks_in_flight_do_not_stall_another_agent",
        "tests/web/test_oauth_replicas.py",
    }
)


def _heavy_marks(item: pytest.Item) -> list[str]:
    """Marks a test gets from where it lives and what it is called: Chromium tests
    (`*_browser.py`), soaks (replicas, the bench's own test, a name with "soak"), tests
    that SIGKILL a process, and the `SLOW` ones."""
    name, module = item.name.lower(), item.path.name
    marks = []
    if module.endswith("_browser.py"):
        marks.append("browser")
    if "soak" in name or module in ("test_replicas.py", "test_bench.py"):
        marks.append("soak")
    if "sigkill" in name or "killed" in name:
        marks.append("kill")
    function = item.nodeid.split("[")[0]
    if function in SLOW or function.split("::")[0] in SLOW:
        marks.append("slow")
    return marks


def _sampled(items: list[pytest.Item]) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """The quick loop's sample of the database-by-provider matrix: of the tests that differ
    only in their database and key provider, one, picked by a hash of the test's name, so
    the sample is the same each run and the suite as a whole still visits every cell."""
    groups: dict[str, list[pytest.Item]] = {}
    kept: list[pytest.Item] = []
    for item in items:
        params = getattr(item, "callspec", None)
        axes = [a for a in SAMPLED_AXES if params is not None and a in params.params]
        if not axes:
            kept.append(item)
            continue
        assert params is not None
        rest = params.id  # the ids, the same in every xdist worker (a repr may not be)
        for axis in axes:
            rest = rest.replace(str(params.params[axis]), "", 1)
        groups.setdefault(f"{item.nodeid.split('[')[0]} {rest}", []).append(item)
    dropped: list[pytest.Item] = []
    for key, group in groups.items():
        pick = zlib.crc32(key.encode()) % len(group)
        kept.append(group[pick])
        dropped.extend(g for i, g in enumerate(group) if i != pick)
    order = {id(item): n for n, item in enumerate(items)}
    kept.sort(key=lambda item: order[id(item)])
    return kept, dropped


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    heavy: set[int] = set()
    for item in items:
        for mark in _heavy_marks(item):
            item.add_marker(getattr(pytest.mark, mark))
        if any(item.get_closest_marker(m) for m in (*HEAVY_MARKS, "slow", "wheel")):
            heavy.add(id(item))  # marked here, or by a decorator of its own
    # The heavy tests first: one of them started last would leave the other workers idle
    # while it runs (the same order in every worker, as xdist requires: a stable sort of
    # the collection order). xdist's `load` hands each worker a quarter of a quarter of the
    # collection at first, in order (180 tests of 2,900): all the heavy ones went to one
    # worker, which ran them one after the other while the others ran the rest, then waited.
    # Spreading them (`--maxschedchunk 1`) ran four heavy tests at once on two cores and cost
    # as much as it saved, and TKV_HEAVY_WORKERS=2 (half of them at the head of each of the
    # first two workers' batches, two at once) made them 1.6x slower and the whole run 4%
    # longer than this order's tail (tests/durations.md), so the default stays one worker.
    items.sort(key=lambda item: id(item) not in heavy)
    if QUICK:
        kept, dropped = _sampled(items)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    workers = getattr(config, "workerinput", {}).get("workercount", 0)
    spread = int(os.environ.get("TKV_HEAVY_WORKERS", "1"))
    if 1 < spread <= workers:
        items[:] = _spread_heavy(items, heavy, workers, spread)


def _spread_heavy(
    items: list[pytest.Item], heavy: set[int], workers: int, spread: int
) -> list[pytest.Item]:
    """The order that gives each of the first `spread` workers an equal share of the heavy
    tests at the head of its first batch: xdist's `load` sends worker n the n-th run of
    (tests // workers // 4) consecutive tests first (xdist/scheduler/load.py)."""
    chunk = max(len(items) // workers // 4, 2)
    heavy_items = [item for item in items if id(item) in heavy]
    light = [item for item in items if id(item) not in heavy]
    ordered: list[pytest.Item] = []
    spilled: list[pytest.Item] = []
    for slot in range(spread):
        share = heavy_items[slot::spread]
        head, rest = share[:chunk], share[chunk:]
        spilled += rest
        fill = chunk - len(head)
        ordered += head + light[:fill]
        light = light[fill:]
    return ordered + spilled + light


@pytest.hookimpl(tryfirst=True)  # before pytest parametrizes the fixture with both databases
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "database_url" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "one_database"
    ):
        # A parametrize mark, not metafunc.parametrize: pytest lets a test's own mark
        # override a parametrized fixture's params.
        metafunc.definition.add_marker(
            pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
        )
    if "key_provider" not in metafunc.fixturenames or _own_cells(metafunc.definition):
        return
    marker = metafunc.definition.get_closest_marker("key_providers")
    if marker is not None:  # a module's own choice wins (an upgrade needs its release's)
        names = list(marker.args)
    elif FORCED_PROVIDER:
        names = [FORCED_PROVIDER]
    else:
        names = [module_provider(metafunc.module.__name__)]
    metafunc.parametrize("key_provider", names)


def _own_cells(definition: pytest.Function) -> bool:
    """Whether a test names its key providers itself, paired with its databases
    (`provider_support.key_cells`), not the whole product of the two."""
    for mark in definition.iter_markers("parametrize"):
        names = mark.args[0]
        if isinstance(names, str):
            names = [name.strip() for name in names.split(",")]
        if "key_provider" in names:
            return True
    return False


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say how many tests ran with each key provider (from the reports, so it works under
    xdist too: `key_options` records the provider on each test)."""
    counts: Counter[str] = Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) == "call":
                counts.update(
                    v for k, v in getattr(report, "user_properties", ()) if k == "key_provider"
                )
    if counts:
        line = ", ".join(f"{name}: {counts[name]}" for name in sorted(counts))
        terminalreporter.write_line(f"tests per key provider: {line}")


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's KMS as a real HTTP server on a free loopback port, for this test process."""
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
def auth() -> Iterator[AuthServer]:
    """The authlib authorization server of `oauth_server` on loopback, for the OAuth tests
    (imported here, not at the top: the other tests need no flask or authlib)."""
    from oauth_server import running_auth_server

    with running_auth_server() as running:
        try:
            yield running
        finally:  # the log scan looks for every token it issued
            issued = [*running.issued(), running.client_secret, *running.registered_secrets]
            note_secrets(os.environ.get(LOG_COPY), f"oauth-{os.getpid()}", issued)


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


@pytest.fixture(scope="session")
def softhsm_conf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A SoftHSM2 token in a temporary directory, SOFTHSM2_CONF pointing at it before the
    PKCS#11 module is first loaded (subprocesses inherit it)."""
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


@pytest.fixture(scope="session")
def _softhsm_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new token, made once per worker, that each test's token is copied from."""
    try:
        return make_softhsm_token(tmp_path_factory.mktemp("softhsm-template"))
    except (RuntimeError, OSError) as exc:
        pytest.fail(f"SoftHSM2 is required for the pkcs11 provider tests: {exc}")


# SoftHSM2 rewrites a token's files by truncating them, and on ext4 the close of a file
# truncated and written again waits for its data to reach the disk (auto_da_alloc): 80 ms
# to create a key on disk, 2 ms in memory. So each test's token lives in /dev/shm (tmpfs).
MEMORY_DIR = "/dev/shm"


@pytest.fixture
def softhsm_token(
    softhsm_conf: Path, _softhsm_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A SoftHSM2 token of this test's own. SoftHSM2 rewrites its token file in place on
    every login, so a test that SIGKILLs a process mid-login can leave that file empty: on a
    token shared by the session, every later PKCS#11 test of the worker would then fail.
    The module is unloaded on both sides, so its next load reads the SOFTHSM2_CONF in force.
    A copy of the worker's new token, not a token made again (softhsm2-util, 35 ms)."""
    import pkcs11

    in_memory = os.path.isdir(MEMORY_DIR) and os.access(MEMORY_DIR, os.W_OK)
    if in_memory:
        directory = Path(tempfile.mkdtemp(prefix="tkv-softhsm-", dir=MEMORY_DIR))
    else:
        directory = tmp_path / "softhsm"
    conf = copy_softhsm_token(_softhsm_template, directory)
    pkcs11.unload(SOFTHSM_MODULE)
    monkeypatch.setenv("SOFTHSM2_CONF", str(conf))
    try:
        yield conf
    finally:
        pkcs11.unload(SOFTHSM_MODULE)
        if in_memory:
            shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def key_options(
    key_provider: str, request: pytest.FixtureRequest, tmp_path: Path
) -> dict[str, str]:
    """The `home` fixture's key provider options, its server started and the environment
    its credentials come from set (for this process and the CLI processes of `cli_env`)."""
    request.node.user_properties.append(("key_provider", key_provider))
    if key_provider == "aws-kms":
        endpoint: str = request.getfixturevalue("moto_endpoint")
        request.getfixturevalue("aws_env")
        return {"endpoint_url": endpoint}
    if key_provider == "pkcs11":
        request.getfixturevalue("softhsm_token")
        pin = tmp_path / "pkcs11-pin"
        pin.write_text(USER_PIN + "\n")
        pin.chmod(stat.S_IRUSR | stat.S_IWUSR)
        return {
            "module": SOFTHSM_MODULE,
            "token_label": TOKEN_LABEL,
            "key_label": f"tkv-{uuid.uuid4().hex[:12]}",
            "pin_file": str(pin),
        }
    return {}


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A scratch database for this test run, dropped at the end."""
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text("select 1"))
    except Exception as exc:
        pytest.fail(f"PostgreSQL is required for the test suite and unreachable: {exc}")
    name = f"tkv_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
        # A commit returns before its WAL reaches the disk (about 4 ms a commit here, some
        # 30 in a vault's set-up). What the vault's connections see is unchanged: only a
        # crash of the server itself could lose a commit, and no test crashes it.
        conn.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit = off'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        postgres_support.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> str:
    """The scratch PostgreSQL database with its tables emptied (PostgreSQL-only tests)."""
    postgres_support.empty_postgres(postgres_url)
    return postgres_url


@pytest.fixture
def plugins_path() -> Path:
    return PLUGINS


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'home' / 'vault.db'}"
    url: str = request.getfixturevalue("postgres_url")
    postgres_support.empty_postgres(url)
    return url


@pytest.fixture
def empty_database_url(database_url: str) -> Iterator[str]:
    """A database with no tables at all (PostgreSQL: the scratch schema is recreated, before
    the test and after it, so a test that fails halfway through an old release's schema
    leaves the next test on this worker an empty database, not a half-migrated one)."""
    if not database_url.startswith("postgresql"):
        yield database_url
        return
    _recreate_schema(database_url)
    try:
        yield database_url
    finally:
        _recreate_schema(database_url)


def _recreate_schema(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture
def home(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    key_provider: str,
    key_options: dict[str, str],
) -> VaultSettings:
    """An initialized vault home, its master key in the test's key provider."""
    monkeypatch.setenv("TOOLKIT_VAULT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TOOLKIT_VAULT_DATABASE_URL", database_url)
    monkeypatch.delenv("TOOLKIT_VAULT_KEY_PROVIDER", raising=False)
    monkeypatch.delenv("TOOLKIT_VAULT_MASTER_KEYS", raising=False)
    database = make_url(database_url).database
    if database_url.startswith("sqlite") and database and not Path(database).exists():
        # A copy of the worker's migrated, empty database: `init` then finds the schema at
        # its head and skips Alembic (PostgreSQL's scratch database is migrated once too).
        Path(database).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copyfile(request.getfixturevalue("_migrated_sqlite"), database)
    init_vault(load_settings(key_provider, key_options))
    return load_settings()


@pytest.fixture(scope="session")
def _migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite database at the schema's head, made once per worker."""
    path = tmp_path_factory.mktemp("template") / "vault.db"
    engine = open_engine(f"sqlite:///{path}")
    try:
        migrate(engine)
    finally:
        engine.dispose()
    return path


@pytest.fixture(autouse=True)
def _secrets_of_this_test_only() -> Iterator[None]:
    """The secrets `logs.redact` knows are the process's: in a test worker, every secret
    every earlier test registered (hypothesis registers thousands of short random ones). A
    status event whose ordinary words held one of them was dropped as "carries a secret
    value", a flake that depended on which tests ran before. Each test keeps what was
    registered before it began (its wider-scoped fixtures') and what it registers."""
    with logs._secrets_lock:
        kept = {prefix: set(found) for prefix, found in logs._secrets.items()}
    yield
    with logs._secrets_lock:
        logs._secrets.clear()
        logs._secrets.update(kept)


@pytest.fixture
def host() -> Iterator[UpstreamHost]:
    """An MCP client's loop thread for the tests of `mcp_client`, holding results to their
    output schemas as the vault does (`schema.output_check`)."""
    from toolkit_vault.mcp_client import UpstreamHost
    from toolkit_vault.schema import output_check

    upstream = UpstreamHost(output_check)
    yield upstream
    upstream.close()


@pytest.fixture
def vault(home: VaultSettings) -> Iterator[Vault]:
    opened = open_vault(home)
    yield opened
    opened.store.close()  # its call chain anchored (as at a clean shutdown), then disposed


@pytest.fixture
def spec_vault(home: VaultSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Vault]:
    """A vault opened with the spec-shaped plugin distribution installed (this test only)."""
    monkeypatch.syspath_prepend(str(SPEC_PLUGINS))
    opened = open_vault(home)
    yield opened
    opened.store.close()


@pytest.fixture
def cli_env(tmp_path: Path, database_url: str, key_options: dict[str, str]) -> dict[str, str]:
    """Environment for `toolkit-vault` subprocesses on the `home` fixture's home and database,
    with the test plugins installed and the key provider's credentials (as the operator's
    environment would hold them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), env.get("PYTHONPATH", "")])
    env["TOOLKIT_VAULT_HOME"] = str(tmp_path / "home")
    env["TOOLKIT_VAULT_DATABASE_URL"] = database_url
    env["TOOLKIT_VAULT_NO_DISCOVER"] = "1"  # an import never asks a real remote server
    if LOG_COPY in os.environ:  # the session's log copy (see the module's docstring)
        env[LOG_COPY] = os.environ[LOG_COPY]
    return env


@pytest.fixture
def fresh_env(tmp_path: Path, empty_database_url: str, cli_env: dict[str, str]) -> dict[str, str]:
    """Environment for a home and database that `init` has not touched yet."""
    env = {**cli_env, "TOOLKIT_VAULT_HOME": str(tmp_path / "fresh")}
    if empty_database_url.startswith("sqlite"):
        env["TOOLKIT_VAULT_DATABASE_URL"] = f"sqlite:///{tmp_path / 'fresh' / 'vault.db'}"
    return env


@pytest.fixture
def spec_cli_env(cli_env: dict[str, str]) -> dict[str, str]:
    """`cli_env` with the spec-shaped plugin distribution installed as well."""
    return {**cli_env, "PYTHONPATH": os.pathsep.join([str(SPEC_PLUGINS), cli_env["PYTHONPATH"]])}


@pytest.fixture
def stored_only(monkeypatch: pytest.MonkeyPatch, cli_env: dict[str, str]) -> None:
    """A vault that runs no imported server (`TOOLKIT_VAULT_RUN_SERVERS=off`), in this
    process and in those `cli_env` starts: its imported toolkits' configs are only stored,
    for tests of storing, whose packages (made up, or not installed here) could not start."""
    from toolkit_vault.toolkits import served

    monkeypatch.setenv(served.RUN_SERVERS_ENV, "off")
    cli_env[served.RUN_SERVERS_ENV] = "off"
    off = dataclasses.replace(served._servers.settings, run=False)
    monkeypatch.setattr(served._servers, "settings", off)
