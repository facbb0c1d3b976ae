"""Remove one protection at a time and check that the tests notice (`scripts/mutants`).

A test proves a protection only if it fails without it. Each mutant below replaces one
exact snippet of the source (which must occur exactly once) in a scratch copy of `service/`
and `migrations/`, then runs the tests that should catch it with that copy first on
PYTHONPATH (the CLI processes the tests start inherit it). A mutant is *killed* when those
tests fail; *survived* when they pass; *stale* when its snippet is gone (the code moved:
update the list). Exit status 1 unless every mutant is killed.

    scripts/mutants                 every mutant
    scripts/mutants -k relay        those whose name contains "relay"
    scripts/mutants --list          names only
    scripts/mutants -j 2            two at a time, each in its own scratch copy
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 900  # seconds per mutant


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # under service/
    find: str
    replace: str
    tests: tuple[str, ...]
    select: str = "not postgres"  # pytest -k: SQLite is enough to notice, unless named
    also: tuple[tuple[str, str, str], ...] = ()  # more (path, find, replace): one protection
    # kept in two places (a belt and braces) is removed from both

    @property
    def edits(self) -> tuple[tuple[str, str, str], ...]:
        return ((self.path, self.find, self.replace), *self.also)


V = "toolkit_vault/"
CRYPTO, AUDIT, CHAIN = V + "crypto.py", V + "audit/verify.py", V + "store/chain.py"
STORAGE, RECONCILE, WRITER = V + "store/storage.py", V + "store/reconcile.py", V + "store/writer.py"
STATEMENTS = V + "store/statements.py"
RECONCILE_VERSIONS = V + "store/reconcile_versions.py"
MARKS = V + "store/marks.py"
TRANSACTIONS = V + "store/transactions.py"
FOLLOWING = V + "store/following.py"
LINKS = V + "store/links.py"
VERSIONS = V + "store/versions.py"
STATE_TESTS = ("tests/adversarial/test_authenticated_state.py",)
REPLAY_TESTS = ("tests/adversarial/test_replays.py",)
EDGES = "tests/adversarial/test_state_edges.py::"
LIVE_REGISTRY = ("tests/test_live_registry.py",)
SLOW_CLIENTS = "tests/adversarial/test_slow_clients.py::"
LIFE = "tests/test_server_lifecycle.py::"
PINS = "tests/test_tool_pins.py::"
NAMES = "tests/test_import_names.py::"
PUBLISHED = "tests/test_published_packages.py::"
REMOTE = "tests/test_remote_servers.py::"
SSE_CLIENT, SSE_VAULT = "tests/test_mcp_client_remote.py::", "tests/test_remote_sse.py::"
RESULTS = "tests/test_mcp_client_results.py::"
SERVED = "tests/test_imported_servers.py::"
OPENID = V + "oauth/openid.py"
OIDC_TESTS = "tests/test_oidc.py"
CALL_AUDIT = "tests/test_call_audit.py::"
TOOL_CALLS = "tests/test_tool_calls.py::"
SANDBOX = "tests/test_sandbox.py::"
BODY_TESTS = (SLOW_CLIENTS + "test_a_body_sent_too_slowly_gets_408_and_the_connection_is_closed",)
ORIGIN = "tests/test_intake_origin.py::"
LEAKS = ("tests/adversarial/test_leaks.py",)
FILESYSTEM = ("tests/test_filesystem.py",)
TOOL_PLUGINS = "tests/test_tool_plugins.py::"
MCP_HTTP, MCP_NAMES = "tests/test_mcp_endpoint.py::", "tests/test_mcp_endpoint_names.py::"
INTAKE_TESTS = ("tests/web/test_intake.py",)
TAMPER_TESTS = ("tests/adversarial/test_tampering.py", "tests/test_vault.py")
SCOPE_TESTS = ("tests/test_scopes.py",)
NOTICES, NOTICES_TESTS = V + "store/notices.py", "tests/test_commit_notices.py::"
OAUTH, OAUTH_BROWSER = "tests/test_oauth.py::", "tests/web/test_oauth_browser.py::"
MIXUP = "tests/test_oauth_mixup.py::"
VERIFY = "tests/test_verification.py::"
IMPORT_OAUTH, ADDRESSES = "tests/test_import_oauth.py::", "tests/test_addresses.py"
VERIFY_LOGS, VERIFY_DEADLINE = "tests/test_verify_logs.py::", "tests/test_verify_deadline.py::"
EXPIRY = "tests/test_expiry.py::"
TEMPLATES = "tests/test_templates.py::"
ALLOWANCES, LIMITS = "tests/test_allowances.py::", "tests/test_call_limits.py::"
ALLOWANCE_CALLS = "tests/test_allowance_calls.py::"
TRAIL = "tests/test_audit_trail.py::"
OPERATOR_API = "tests/test_operator_api.py::"
OPERATOR_BROWSER = "tests/web/test_console_operator_browser.py::"
EXPIRY_TESTS = "tests/test_token_expiry.py"
DEVICES, DEVICE_TESTS = V + "audit/devices.py", "tests/test_audit_devices.py::"
TARGETS = V + "audit/targets.py"
FAIL_CLOSED_TEST = DEVICE_TESTS + "test_fail_closed_with_a_dead_device_leaves_the_store_as_it_was"
BACKUP, BACKUP_TESTS = V + "backup/", "tests/test_backup.py::"
WORKERS = "tests/test_version_workers.py::"
RECOVERY_TESTS = "tests/test_recovery.py::"
RESTORE_TEST = (
    BACKUP_TESTS + "test_restore_over_a_newer_witness_needs_the_explicit_step_and_is_audited"
)

MCP_LISTS = "tests/test_mcp_endpoint_lists.py::"
CALL_CHAINS = "tests/test_call_chains.py::"
TABLES = "tests/web/test_console_tables_browser.py"
TRACED_CALL = "tests/test_traces_tool_call.py"
TRANSPORT_CALLS = "tests/test_tool_calls_transports.py::"
GATHERING = "tests/test_call_gathering.py::"
ANSWER_AFTER = "tests/test_call_answer_after_commit.py::"
INCREMENTAL = "tests/test_incremental_verify.py::"
CHAIN_WORD = "tests/adversarial/test_chain_word_reads.py::"
VALUE_HEAD = "associated_data(FORMAT_VERSION, self.session_id, self.toolkit_name, self.version)"
MUTANTS = [
    # -- the envelope ------------------------------------------------------------------------
    Mutant(
        "commitment check",
        CRYPTO,
        "if not hmac.compare_digest(expected, commitment):",
        "if False:",
        ("tests/test_crypto.py",),
    ),
    *(
        Mutant(
            f"value AAD without {label}", CRYPTO, old, new, ("tests/test_crypto.py", *TAMPER_TESTS)
        )
        for label, old, new in (
            ("session", VALUE_HEAD, VALUE_HEAD.replace(" self.session_id,", "")),
            ("toolkit", VALUE_HEAD, VALUE_HEAD.replace(" self.toolkit_name,", "")),
            ("version", VALUE_HEAD, VALUE_HEAD.replace(", self.version", "")),
            ("pointer", "head + associated_data(pointer) + tail", "head + tail"),
            (
                "schema digest",
                "tail = associated_data(self.schema_digest, dek_id)",
                "tail = associated_data(dek_id)",
            ),
        )
    ),
    Mutant(
        "one nonce for a whole rotation batch",
        CRYPTO,
        "nonce = nonces[n * NONCE_BYTES : (n + 1) * NONCE_BYTES]",
        "nonce = nonces[:NONCE_BYTES]",
        ("tests/test_key_wrap.py",),
    ),
    Mutant(
        "a sealed config's values reuse the key wrap's nonce",
        CRYPTO,
        "envelopes[pointer] = seal(dek, plaintext, aad, nonce_source=draw.read)",
        "envelopes[pointer] = seal(dek, plaintext, aad, nonce_source=lambda n: wrapped[33:45])",
        ("tests/test_crypto.py",),
    ),
    Mutant(
        "value AAD without the data key id",
        CRYPTO,
        "tail = associated_data(self.schema_digest, dek_id)",
        "tail = associated_data(self.schema_digest)",
        ("tests/test_crypto.py", *TAMPER_TESTS),
    ),
    Mutant(
        "wrap context without the public half",
        CRYPTO,
        'return (FORMAT_VERSION, "dek", *fields, dek_id, paths, self.public_digest)',
        'return (FORMAT_VERSION, "dek", *fields, dek_id, paths)',
        ("tests/test_crypto.py", *TAMPER_TESTS),
    ),
    Mutant(
        "wrap context without the secret paths",
        CRYPTO,
        'return (FORMAT_VERSION, "dek", *fields, dek_id, paths, self.public_digest)',
        'return (FORMAT_VERSION, "dek", *fields, dek_id, self.public_digest)',
        ("tests/test_crypto.py", *TAMPER_TESTS),
    ),
    Mutant(
        "key wrap without the key id",
        CRYPTO,
        "self.key_aad = associated_data(key_id)",
        'self.key_aad = associated_data("")',
        ("tests/test_key_wrap.py",),
    ),
    Mutant(
        "key wrap binding check",
        CRYPTO,
        "if binding is not None and not hmac.compare_digest(wrapped[_BINDING], binding):",
        "if False:",
        ("tests/test_key_wrap.py", "tests/test_crypto.py"),
    ),
    Mutant(
        "key wrap commitment check",
        CRYPTO,
        "if not hmac.compare_digest(wrapped[_COMMIT], wrapper.commitment):",
        "if False:",
        ("tests/test_key_wrap.py",),
    ),
    Mutant(
        "fingerprints not scoped",
        CRYPTO,
        "associated_data(*scope, pointer)",
        "associated_data(pointer)",
        ("tests/test_crypto.py", *STATE_TESTS),
    ),
    # -- compare-and-set ---------------------------------------------------------------------
    Mutant(
        "rewrap compare-and-set",
        V + "store/data_keys.py",
        '"WHERE id = ? AND kek_id = ? AND wrapped_dek = ?"',
        '"WHERE id = ? AND kek_id = ? AND (wrapped_dek = ? OR 1 = 1)"',
        ("tests/test_rotation.py",),
    ),
    Mutant(
        "pointer compare-and-set",
        STATEMENTS,
        '.where(*_POINTER_KEY, CurrentConfig.version == bindparam("expected"))',
        ".where(*_POINTER_KEY)",
        ("tests/test_storage.py", "tests/adversarial/test_concurrency.py"),
        select="",
    ),
    # -- the audit chain ---------------------------------------------------------------------
    Mutant(
        "audit link check",
        V + "audit/links_check.py",
        "if not fast and not links(sign, previous, as_event(row)):",
        "if False:",
        ("tests/test_audit.py",),
    ),
    Mutant(
        "audit link check skips the first event",
        V + "audit/links_check.py",
        "if not fast and not links(sign, previous, as_event(row)):",
        "if row[0] > 1 and not fast and not links(sign, previous, as_event(row)):",
        ("tests/test_audit.py",),
    ),
    Mutant(
        "audit link check: the fast form believed without its HMAC",
        V + "audit/links_check.py",
        "fast = compare(link.digest(), mac)",
        "fast = True",
        ("tests/test_audit.py",),
    ),
    Mutant(
        "audit link check: the fast form reads details only as far as the C scanner stops",
        V + "canonical.py",
        "            if end == len(text):",
        "            if True:",
        ("tests/test_audit.py", "tests/test_canonical.py"),
        select="(append or parse_json) and not postgres",
    ),
    Mutant(
        "audit link check skips the last event",
        V + "audit/links_check.py",
        "for index, row in enumerate(rows):",
        "for index, row in enumerate(rows[:-1]):",
        ("tests/test_audit.py",),
    ),
    Mutant(
        "audit gap check",
        V + "audit/walk.py",
        "if seq != expected:",
        "if False:",
        ("tests/test_audit.py",),
    ),
    Mutant(
        "audit head covers the tail",
        AUDIT,
        "if head.seq > last_seq:",
        "if False:",
        ("tests/test_audit.py",),
    ),
    Mutant(
        "writers refuse a cut chain",
        CHAIN,
        "    if (\n        head_seq is None\n",
        "    if False and (\n        head_seq is None\n",
        ("tests/test_audit.py",),
    ),
    # -- secrets and errors ------------------------------------------------------------------
    *(
        Mutant(
            f"secret marker {marker}",
            V + "schema/split.py",
            find,
            "False",
            ("tests/test_schema.py", "tests/test_vault.py"),
        )
        for marker, find in (
            ("writeOnly", 'node.get("writeOnly") is True'),
            ("x-secret", 'node.get("x-secret") is True'),
            ("sensitive", 'node.get("sensitive") is True'),
            ("format password", 'node.get("format") == "password"'),
        )
    ),
    Mutant(
        "fail-closed split",
        V + "schema/split.py",
        "if child is None or child.secret:",
        "if child is not None and child.secret:",
        ("tests/test_schema.py", "tests/test_vault.py"),
    ),
    Mutant(
        "RE2's \\B left to match inside a character",
        V + "schema/patterns.py",
        'if "\\\\B" in translated:',
        "if False:",
        ("tests/test_schema_patterns.py",),
    ),
    Mutant(
        "a config value echoed in the error",
        V + "schema/compiled.py",
        "            raise ConfigInvalid(INVALID, details=details)\n\n    def split",
        "            raise ConfigInvalid(INVALID + repr(config), details=details)\n\n    def split",
        ("tests/adversarial/test_leaks.py",),
    ),
    Mutant(
        "log redaction wired to the handler",
        V + "logs.py",
        "handler.addFilter(RedactingFilter())",
        "pass",
        ("tests/adversarial/test_leaks.py", "tests/test_logs.py", "tests/test_http.py"),
    ),
    Mutant(
        "the request line skips logging with another handler in its way",
        V + "logs.py",
        "    return reached == [handler] and len(handler.filters) == 1",
        "    return True",
        ("tests/test_logs.py",),
        "every_handler",
    ),
    Mutant(
        "a request line's path is not redacted",
        V + "logs.py",
        '        fields = {**fields, "path": redact(path)}',
        "        pass",
        ("tests/test_logs.py",),
        "request_path",
    ),
    Mutant(
        "a record goes out before the request lines that came first",
        V + "logs.py",
        "        self._write_pending()  # (`handle` holds the lock) what came first goes out first",
        "        pass",
        ("tests/test_logs.py",),
        "request_lines",
    ),
    Mutant(
        "request lines wait for the next record, however long",
        V + "logs.py",
        "            self._due.set()",
        "            pass",
        ("tests/test_logs.py",),
        "request_lines",
    ),
    # -- principals and sessions -------------------------------------------------------------
    Mutant(
        "revocation",
        V + "access/principals.py",
        'if row["revoked_at"] is not None:',
        "if False:",
        ("tests/test_tokens.py", "tests/test_http.py"),
        also=(
            (
                V + "access/principals.py",
                "if want is None or want.revoked or",
                "if want is None or",
            ),
        ),
    ),
    Mutant(
        "session ownership",
        STORAGE,
        "if row is None or row.principal_id != principal_id:",
        "if row is None:",
        ("tests/test_vault.py", "tests/test_http.py", *STATE_TESTS),
    ),
    # -- the network path's memory (issue 13) ------------------------------------------------
    Mutant(
        "a list believes memory across a commit",
        MARKS,
        "return None if rows is None else int(rows[0][0])",
        "return None if rows is None else 0",
        ("tests/test_http_access.py", "tests/test_storage.py"),
    ),
    # -- group commit (issue 13) ----------------------------------------------------------------
    Mutant(
        "group commit: a failed write is not rolled back alone",
        TRANSACTIONS,
        'driver.execute("ROLLBACK TO attempt")',
        "pass",
        ("tests/test_storage.py",),
    ),
    Mutant(
        "group commit: a write that gave up waiting is written later",
        WRITER,
        "group, self.queue = self.queue, []\n                for write in group:",
        "group: list[Write] = []\n                for write in group:",
        ("tests/test_storage.py",),
    ),
    Mutant(
        "group commit: a lost group reports its earlier writes stored",
        TRANSACTIONS,
        "                if write.error is None:\n                    write.error = exc\n",
        "                if False:\n                    write.error = exc\n",
        ("tests/test_storage.py",),
    ),
    Mutant(
        "group commit: a write that lost a race is not tried again",
        WRITER,
        "again = [w for w in group if w.error is not None and self._again(w)]",
        "again: list[Write] = []",
        ("tests/test_storage.py",),
    ),
    Mutant(
        "group commit: a write's caller hears before it is live",
        WRITER,
        "            write.settle()\n",
        "            pass\n",
        ("tests/test_storage.py",),
        also=((WRITER, "in writes:\n", "in writes:\n            write.settle()\n"),),
    ),
    Mutant(
        "group commit: a worker waits out the commit of a write it could leave",
        WRITER,
        "left = _LEFT.get() if then is not None else None",
        "left = None",
        ("tests/test_storage.py", "tests/test_vault.py"),
    ),
    Mutant(
        "group commit: a sequential writer hands every write to the writer thread",
        WRITER,
        "led = left is None and self._lock.acquire(blocking=False)",
        "led = False",
        ("tests/test_storage.py",),
    ),
    Mutant(
        "a configure whose write failed after it left is answered as stored",
        V + "core/connection.py",
        "            if write.error is not None:\n                line = dump_message",
        "            if False:\n                line = dump_message",
        ("tests/test_vault.py",),
    ),
    Mutant(
        "canonical JSON: a float like 2.0 written as Python writes it",
        V + "canonical.py",
        "            return int(value) if abs(value) <= _SAFE_INT else _SLOW",
        "            return value if abs(value) <= _SAFE_INT else _SLOW",
        ("tests/test_canonical.py",),
    ),
    Mutant(
        "canonical JSON: non-ASCII keys sorted by code point",
        V + "canonical.py",
        " or not key.isascii()",
        "",
        ("tests/test_canonical.py",),
    ),
    Mutant(
        "workers: a cancelled request's result set anyway",
        V + "transports/workers.py",
        "        if done.cancelled():",
        "        if False:",
        ("tests/test_workers.py",),
    ),
    Mutant(
        "workers: work runs outside the caller's context",
        V + "transports/workers.py",
        "        result = context.run(work, *args)",
        "        result = work(*args)",
        ("tests/test_workers.py",),
    ),
    Mutant(
        "the a2e route skips the request log",
        V + "transports/http_api.py",
        "    app.a2e_post = RequestLog(RememberOrigin(A2EPost(",
        "    app.a2e_post = (RememberOrigin(A2EPost(",
        ("tests/test_http_app.py",),
        "request_log",
    ),
    Mutant(
        "the a2e route forgets the request's origin",
        V + "transports/http_api.py",
        "    app.a2e_post = RequestLog(RememberOrigin(A2EPost(",
        "    app.a2e_post = RequestLog((A2EPost(",
        ("tests/test_http_app.py",),
        "request_log",
    ),
    Mutant(
        "an open WebSocket believes a revoked token",
        V + "transports/http_access.py",
        "            return remembered is principal or remembered == principal",
        "            return True",
        ("tests/test_http_app.py",),
        "revoked",
    ),
    Mutant(
        "an id with a lone surrogate is echoed",
        V + "protocol.py",
        "(plain or _is_unicode(ident))",
        "True",
        ("tests/test_protocol.py",),
    ),
    Mutant(
        "a list's shared mark read before it arrived",
        V + "transports/a2e/over_http.py",
        "            answer = bound.answer_without_blocking(message, await self._marks.read())",
        "            answer = bound.answer_without_blocking(message, (0, 0))",
        ("tests/test_http_access.py",),
        "sees_every_commit",
    ),
    Mutant(
        "a list arriving while the shared mark is on its way takes that read",
        V + "transports/http_access.py",
        "                waiting, self._waiting = self._waiting, []\n                try:\n"
        "                    value = await self._read()\n",
        "                try:\n                    value = await self._read()\n"
        "                    waiting, self._waiting = self._waiting, []\n",
        ("tests/test_http_access.py",),
        "share_one_mark",
    ),
    Mutant(
        "a caller that left stops the shared mark reaching the others",
        V + "transports/http_access.py",
        "            if not waiter.done():  # a cancelled caller (its client left)",
        "            if True:",
        ("tests/test_http_access.py",),
        "caller_that_left",
    ),
    Mutant(
        "a WebSocket's sender fails on a client that left",
        V + "transports/a2e/outbox.py",
        "                except OSError:  # the client left: the loop hears its disconnect",
        "                except ValueError:  # the client left: the loop hears its disconnect",
        ("tests/test_http_app.py",),
        "gone_before",
    ),
    Mutant(
        "a WebSocket's push starts a send beside one under way",
        V + "transports/a2e/outbox.py",
        "        if self._sending is not None:  # a push scheduled behind a send already under",
        "        if False:  # a push scheduled behind a send already under",
        ("tests/test_http_app.py",),
        "one_at_a_time",
    ),
    Mutant(
        "a WebSocket's answer does not wait for its turn to be sent",
        V + "transports/a2e/outbox.py",
        "                await asyncio.shield(self._sending)",
        "                return",
        ("tests/test_http_app.py",),
        "one_at_a_time",
    ),
    Mutant(
        "SQLite's BEGIN refused, raised as the driver's error",
        V + "store/database.py",
        "        raise DBAPIError.instance(statement, None, exc, sqlite3.Error) from None",
        "        raise",
        ("tests/adversarial/test_db_faults.py",),
        "lock_held_past",
    ),
    Mutant(
        "the SQLite pool rotates through its connections (each page cache gone stale)",
        V + "store/database.py",
        '_SQLITE_POOL = {**_POOL, "pool_use_lifo": True}',
        "_SQLITE_POOL = _POOL",
        ("tests/test_storage.py",),
        "returned_last",
    ),
    Mutant(
        "the WebSocket route forgets its origin",
        V + "transports/http_api.py",
        "    app.a2e_socket = RememberOrigin(A2ESocket(",
        "    app.a2e_socket = (A2ESocket(",
        ("tests/test_http_app.py",),
        "intake_link_asked",
    ),
    Mutant(
        "a list's request id written unescaped",
        V + "protocol.py",
        "        _json_string(req_id),",
        "        f'\"{req_id}\"',",
        ("tests/test_protocol.py",),
        "same_line",
    ),
    Mutant(
        "a list believes memory when its pointers moved",
        V + "core/listing.py",
        "        if self.store.pointers_at_once(session_id, scope_id) != had:",
        "        if False:",
        ("tests/test_http_access.py",),
    ),
    Mutant(
        "a list believes memory after a drop",
        V + "core/instance_sync.py",
        "        self.instances.invalidate_reads()  # a list's read before this no longer says",
        "        pass  # a list's read before this no longer says",
        ("tests/test_http_access.py",),
        also=(
            (
                V + "core/instances.py",
                "            if dropped:\n                self._dropped += 1",
                "            if dropped:\n                pass",
            ),
        ),
    ),
    # -- authenticated state (issue 11) ------------------------------------------------------
    Mutant(
        "row MACs are believed unchecked",
        V + "store/integrity.py",
        "        return hmac.compare_digest(expected, bytes(stored))",
        "        return True",
        STATE_TESTS,
    ),
    Mutant(
        "version MAC on resume",
        VERSIONS,
        "and self.authentic(VERSIONS, mapping)",
        "and True",
        STATE_TESTS,
    ),
    Mutant(
        "pointer MAC on resume",
        VERSIONS,
        "and self.authentic(POINTERS, pointer)",
        "and True",
        (STATE_TESTS[0] + "::test_a_pointer_whose_mac_alone_was_edited_is_refused",),
    ),
    Mutant(
        "principal MAC",
        V + "access/principals.py",
        "if not store.authentic(PRINCIPALS, row):",
        "if False:",
        STATE_TESTS,
    ),
    Mutant(
        "a put-back principal meets its revocation",
        V + "access/principals.py",
        "if want is None or want.revoked or",
        "if want is None or",
        STATE_TESTS,
    ),
    # -- tokens with an expiry (issue 37) ------------------------------------------------------
    Mutant(
        "an expired token is believed",
        V + "access/principals.py",
        'if _expired(row["expires_at"], now):',
        "if False:",
        (EXPIRY_TESTS,),
    ),
    Mutant(
        "the principal MAC leaves out the expiry",
        V + "store/integrity.py",
        '*(() if r.get("expires_at") is None else (r["expires_at"],)),',
        "*(),",
        STATE_TESTS,
        "expiry",
    ),
    Mutant(
        "the principal MAC signs a missing expiry too (rows made before expiries fail)",
        V + "store/integrity.py",
        '*(() if r.get("expires_at") is None else (r["expires_at"],)),',
        'r.get("expires_at"),',
        ("tests/test_upgrade.py::test_a_legacy_vault_upgrades_with_nothing_lost",),
        "not postgres and before-hierarchy",
    ),
    Mutant(
        "a principal's expiry is not held to the chain",
        V + "access/principals.py",
        'if want.expires_at != row["expires_at"]:',
        "if False:",
        STATE_TESTS,
        "expiry",
    ),
    Mutant(
        "check and audit verify ignore an expiry the chain does not vouch for",
        RECONCILE,
        'elif row.expires_at != want.get("expires_at"):',
        "elif False:",
        STATE_TESTS,
        "expiry",
    ),
    Mutant(
        "the network path's cache believes an expired token",
        V + "transports/http_access.py",
        "if time.monotonic() - entry[0] >= self.max_age or entry[2].expired():",
        "if time.monotonic() - entry[0] >= self.max_age:",
        (EXPIRY_TESTS,),
        "cache",
    ),
    Mutant(
        "the token cache does not hear of a revocation made in its own process",
        V + "store/principals.py",
        "        _written(store)\n",
        "        pass\n",
        ("tests/test_http_access.py::test_a_revocation_in_this_process_is_learned_at_once",),
    ),
    Mutant(
        "another process believes a revoked token for half a minute (issue 42: replicas)",
        V + "transports/http_access.py",
        "max_age: float = 1.0,",
        "max_age: float = 30.0,",
        ("tests/test_replicas.py",),
        "one_vault",
    ),
    Mutant(
        "an idle WebSocket outlives its token's expiry",
        V + "transports/a2e/over_websocket.py",
        "closer = None if expiry is None else loop.create_task(_close_at(expiry, outbox))",
        "closer = None",
        (EXPIRY_TESTS,),
        "open_websocket",
    ),
    # -- the server's edges (issue 35) ---------------------------------------------------------
    Mutant(
        "push after revocation",
        V + "transports/a2e/outbox.py",
        "if push and self._still_valid is not None and not await self._still_valid():",
        "if False:",
        ("tests/test_push_revocation.py",),
    ),
    Mutant(
        "body deadline",
        V + "transports/http_server.py",
        "            self._await_body()\n",
        "            self._end()\n",
        BODY_TESTS,
    ),
    Mutant(
        "body deadline before the head's",
        V + "transports/http_server.py",
        "if self._deadline is not None and due < self._deadline.when():",
        "if False:",
        BODY_TESTS,
    ),
    Mutant(
        "408 for a late body",
        V + "transports/http_server.py",
        "                self._answer_timeout()\n",
        "                pass\n",
        BODY_TESTS,
    ),
    Mutant(
        "slow connections per address",
        V + "transports/http_server.py",
        "receiving.get(self.client[0], 0) >= slow_per_ip",
        "False",
        (SLOW_CLIENTS + "test_one_address_cannot_hold_every_descriptor",),
    ),
    Mutant(
        "a client cut off mid-body is answered quietly",
        V + "transports/web/__init__.py",
        "    app.add_exception_handler(ClientDisconnect, client_left)\n",
        "",
        BODY_TESTS,
    ),
    Mutant(
        "intake origin from the Host header",
        V + "transports/web/__init__.py",
        'host, port = scope.get("server") or ("localhost", None)',
        'host, port = dict(scope["headers"]).get(b"host", b"localhost").decode(), None',
        (ORIGIN + "test_in_process_the_link_names_the_server_never_a_header",),
    ),
    Mutant(
        "X-Forwarded-* headers believed",
        V + "transports/http_server.py",
        "proxy_headers=False,",
        "proxy_headers=True,",
        (ORIGIN + "test_on_port_0_the_link_names_the_socket_not_a_forwarded_header",),
    ),
    Mutant(
        "serve's configured origin",
        V + "cli/serving.py",
        "create_app(vault, provider, limits, origin, oidc)",
        "create_app(vault, provider, limits, None, oidc)",
        (ORIGIN + "test_serve_names_its_own_address_or_its_public_url",),
    ),
    # -- stdio's redaction and the filesystem root policy (issue 35) ---------------------------
    Mutant(
        "stdio redacts no log record",
        V + "transports/stdio.py",
        "        redact_every_record()",
        "        pass",
        LEAKS,
        "plugin_logging_its_key and not postgres",
    ),
    Mutant(
        "log records redacted only by a handler's filter",
        V + "logs.py",
        "    logging.setLogRecordFactory(redacting_factory)",
        "    pass",
        LEAKS,
        "plugin_logging_its_key and not postgres",
    ),
    Mutant(
        "warnings written past logging under stdio",
        V + "logs.py",
        "    logging.captureWarnings(True)",
        "    pass",
        LEAKS,
        "plugin_logging_its_key and not postgres",
    ),
    Mutant(
        "a thread's uncaught exception printed as it is under stdio",
        V + "logs.py",
        "    threading.excepthook = _log_thread_exception",
        "    pass",
        LEAKS,
        "plugin_logging_its_key and not postgres",
    ),
    Mutant(
        "a log message whose arguments do not fit it kept as it is",
        V + "logs.py",
        "        message = UNFIT_MESSAGE  # would print them as they are, so neither is kept",
        "        return",
        (*LEAKS, "tests/test_logs.py"),
        "(plugin_logging_its_key or do_not_fit) and not postgres",
    ),
    Mutant(
        "filesystem: system directories allowed as roots",
        V + "toolkits/filesystem.py",
        "_system(root) or ",
        "",
        FILESYSTEM,
    ),
    Mutant(
        "filesystem: a home (or what holds one) allowed as a root",
        V + "toolkits/filesystem.py",
        "_home(root) or ",
        "",
        FILESYSTEM,
    ),
    Mutant(
        "filesystem: a hidden directory allowed as a root",
        V + "toolkits/filesystem.py",
        " or _hidden(root)",
        "",
        FILESYSTEM,
    ),
    Mutant(
        "filesystem: the operator's allow-list ignored",
        V + "toolkits/filesystem.py",
        " or not _listed(root)",
        "",
        FILESYSTEM,
    ),
    Mutant(
        "filesystem: an empty allow-list allows every root",
        V + "toolkits/filesystem.py",
        "    if listed is None:\n        return True",
        "    if not listed:\n        return True",
        FILESYSTEM,
    ),
    Mutant(
        "filesystem: the root policy checks the path before resolving symlinks",
        V + "toolkits/filesystem.py",
        "refused = _system(root) or _home(root) or _hidden(root) or not _listed(root)",
        "refused = _system(given) or _home(given) or _hidden(given) or not _listed(given)",
        FILESYSTEM,
    ),
    Mutant(
        "filesystem: a missing root_dir told apart from a refused one",
        V + "toolkits/filesystem.py",
        "        usable = not refused and root.is_dir()",
        "        usable = not refused and root.is_dir()\n"
        "        if not refused and not usable:\n"
        '            _refuse("root_dir does not exist", "exists")',
        FILESYSTEM,
    ),
    Mutant(
        "filesystem: a tool path climbing out as written is resolved first",
        V + "toolkits/filesystem.py",
        "if os.path.isabs(written) or written.split(os.sep)[0] == os.pardir:",
        "if os.path.isabs(written):",
        FILESYSTEM,
    ),
    Mutant(
        "filesystem: a tool's missing file raises the OS error (with its path)",
        V + "toolkits/filesystem.py",
        "                data = handle.read(MAX_READ_BYTES + 1)\n        except OSError:",
        "                data = handle.read(MAX_READ_BYTES + 1)\n        except ZeroDivisionError:",
        FILESYSTEM,
    ),
    Mutant(
        "filesystem: a tool path resolving outside the root (symlink out) followed",
        V + "toolkits/filesystem.py",
        "        if not candidate.is_relative_to(root):\n"
        "            raise PathRefused(UNAVAILABLE)",
        "        pass",
        FILESYSTEM,
    ),
    # -- the live registry: imports and removals made elsewhere (issue 37) ---------------------
    Mutant(
        "live registry: the chain counts imports and removals",
        V + "store/ledger.py",
        "            self.imported[toolkit] = None\n            self.registry_changes += 1\n",
        "            self.imported[toolkit] = None\n",
        LIVE_REGISTRY,
        also=(
            (
                V + "store/ledger.py",
                'details.get("schema_digest"))\n            self.registry_changes += 1\n',
                'details.get("schema_digest"))\n',
            ),
        ),
    ),
    Mutant(
        "live registry: a configure follows the latest import",
        V + "core/registry_follow.py",
        "        if chain is None:\n            self.follow()\n        else:\n"
        "            self.follow_chain(chain)\n        return self.registry.get(name)",
        "        return self.registry.get(name)",
        LIVE_REGISTRY,
    ),
    Mutant(
        "live registry: a list follows the latest import",
        V + "core/instance_sync.py",
        "        if self.registry_follower.follow_chain(chain):  # instances may have been dropped",
        "        if False:  # instances may have been dropped",
        LIVE_REGISTRY,
    ),
    Mutant(
        "live registry: a list from memory waits for the latest import",
        V + "core/listing.py",
        "        if chain.registry_changes != self.registry_follower.seen:",
        "        if False:",
        LIVE_REGISTRY,
    ),
    Mutant(
        "live registry: a configure's write checks its import is still there",
        VERSIONS,
        "            if imported is not None:\n                self._check_imported(",
        "            if False:\n                self._check_imported(",
        LIVE_REGISTRY,
    ),
    Mutant(
        "live registry: a configure's write checks its import was not replaced",
        VERSIONS,
        "        if found != digest:",
        "        if False:",
        LIVE_REGISTRY,
    ),
    Mutant(
        "live registry: a removal ends the instances made before it",
        V + "store/ledger.py",
        "return version <= self.removed.get(toolkit, {}).get(scope, 0)",
        "return False",
        LIVE_REGISTRY,
    ),
    Mutant(
        "live registry: a removed toolkit's instances are dropped",
        V + "core/registry_follow.py",
        "            return name not in now or bool(chain and",
        "            return False and bool(chain and",
        LIVE_REGISTRY,
    ),
    Mutant(
        "live registry: serve watches the chain between requests",
        V + "cli/serving.py",
        "    RegistryWatch(vault).start()",
        "    RegistryWatch(vault)",
        LIVE_REGISTRY,
    ),
    # -- freshness: the verified chain's word (issue 35) --------------------------------------
    Mutant(
        "freshness: a pointer names the chain's current version",
        VERSIONS,
        "and state.pointer(row.session_id, row.toolkit_name) == row.version",
        "and True",
        REPLAY_TESTS,
    ),
    Mutant(
        "freshness: a principal as the chain has it",
        V + "access/principals.py",
        'if want is None or want.revoked or (want.name, want.role) != (row["name"], row["role"]):',
        "if False:",
        STATE_TESTS,
    ),
    Mutant(
        "freshness: every link verified while following",
        V + "store/ledger.py",
        "                holds = links(self._sign, self.mac, event)",
        "                holds = True",
        ("tests/test_ledger.py",),
    ),
    Mutant(
        "freshness: an intake link's version is the chain's last",
        VERSIONS,
        "if state.last_version(scope, toolkit) != version or row is None:",
        "if row is None:",
        INTAKE_TESTS,
    ),
    Mutant(
        "freshness: an intake link's pending row is authentic",
        VERSIONS,
        'log.warning("%s v%s of scope %s fails its integrity check", toolkit, version, scope)\n'
        "            return None",
        'log.warning("%s v%s of scope %s fails its integrity check", toolkit, version, scope)',
        INTAKE_TESTS,
    ),
    Mutant(
        "freshness: an event this process committed is checked against its stored link",
        V + "store/ledger.py",
        'holds = hmac.compare_digest(bytes(event["mac"]), mine["mac"])',
        "holds = True",
        ("tests/test_ledger.py",),
    ),
    Mutant(
        "freshness: a running process drops an instance the chain no longer vouches for",
        V + "core/instance_sync.py",
        "        stale = self._stale(had, chain)",
        "        stale: set[str] = set()",
        REPLAY_TESTS,
    ),
    Mutant(
        "freshness: a list from memory checks the chain",
        V + "core/listing.py",
        "        if chain is None or self._stale(had, chain):",
        "        if chain is None:",
        REPLAY_TESTS,
    ),
    Mutant(
        "witness: a database behind it is not believed",
        V + "store/ledger.py",
        "elif witness is not None and self.seq < witness[0]:",
        "elif False:",
        REPLAY_TESTS,
    ),
    Mutant(
        "witness: no write extends a database behind it",
        LINKS,
        "if witness is not None and last_seq < witness[0]:",
        "if False:",
        REPLAY_TESTS,
    ),
    Mutant(
        "witness: its MAC",
        FOLLOWING,
        "if sign is not None and hmac.compare_digest(head_link(sign, seq, mac), head_mac):",
        "if sign is not None:",
        REPLAY_TESTS,
    ),
    Mutant(
        "witness: made in place, so a reader can find it empty",
        V + "store/witness.py",
        "        if not self._create(_encode(head) + (_encode(head) if force else _EMPTY)):\n",
        "        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))\n        if True:\n",
        ("tests/adversarial/test_replays.py",),
        "being_made or killed_as_its_witness",  # the reader's race may miss it under load
    ),
    Mutant(
        "witness: made empty, its first head written after (a kill between leaves no head)",
        V + "store/witness.py",
        "if not self._create(_encode(head) + (_encode(head) if force else _EMPTY)):",
        "if not (self._create(_EMPTY + _EMPTY) and False):",
        ("tests/adversarial/test_replays.py",),
        "killed_as_its_witness",
    ),
    Mutant(
        "witness: audit verify compares it",
        AUDIT,
        "            broken = _check_witness(store, snapshot, verified)",
        "            broken = None",
        REPLAY_TESTS,
    ),
    Mutant(
        "reconcile: a purged version put back",
        RECONCILE_VERSIONS,
        'if found is None and chain.was_purged(*name) and first[_STATUS] != "purged":',
        "if False:",
        REPLAY_TESTS,
    ),
    Mutant(
        "check: a purged version put back",
        V + "keys/version_check.py",
        'and chain.was_purged(row["session_id"], row["toolkit_name"], row["version"])',
        "and False",
        REPLAY_TESTS,
    ),
    Mutant(
        "session MAC",
        STORAGE,
        "if not self.authentic(SESSIONS, row._mapping):",
        "if False:",
        STATE_TESTS,
    ),
    Mutant(
        "imported definition MAC",
        V + "toolkits/imports.py",
        "if not store.authentic(IMPORTED, row):",
        "if False:",
        STATE_TESTS,
    ),
    Mutant(
        "imported definition is the latest import",
        V + "toolkits/imports.py",
        'if not imported_as_audited(row, state.imported.get(row["name"])):',
        "if False:",
        STATE_TESTS,
    ),
    Mutant(
        "vault key record MACs",
        V + "keys/keystore.py",
        "if not store.authentic(VAULT_KEYS, record.columns()):",
        "if False:",
        STATE_TESTS,
    ),
    Mutant(
        "reconcile: a retired vault key put back",
        RECONCILE,
        "elif (row.retired_at is not None) != (row.key_id in retired):\n"
        '            found = ("replayed", "its retirement disagrees with the audit chain (vault',
        "elif False:\n"
        '            found = ("replayed", "its retirement disagrees with the audit chain (vault',
        STATE_TESTS,
    ),
    Mutant(
        "a master key rotation starts over a pending one",
        V + "keys/rotation.py",
        "rotated = not behind",
        "rotated = True",
        ("tests/test_rotation.py",),
    ),
    Mutant(
        "a vault key retires while it wraps keys",
        V + "keys/admin.py",
        "    if in_use:\n",
        "    if False:\n",
        ("tests/test_rotation.py",),
    ),
    Mutant(
        "a master key retires while it wraps a vault key",
        V + "keys/admin.py",
        "    if users:\n",
        "    if False:\n",
        ("tests/test_rotation.py",),
    ),
    Mutant(
        "a process does not reload keys rotated elsewhere",
        V + "core/sealing.py",
        "if all(key_id in self.ring for key_id in key_ids) or self._reload_keys is None:",
        "if True:",
        ("tests/test_key_hierarchy.py",),
    ),
    Mutant(
        "reconcile: a revoked principal put back",
        RECONCILE,
        'elif want["revoked"] and row.revoked_at is None:',
        "elif False:",
        STATE_TESTS,
    ),
    Mutant(
        "reconcile: a pointer put back",
        RECONCILE,
        "elif want != row.version:",
        "elif False:",
        STATE_TESTS,
    ),
    Mutant(
        "reconcile: an older import put back",
        RECONCILE,
        "elif not imported_as_audited(row._mapping, _imported_by(event)):",
        "elif False:",
        STATE_TESTS,
    ),
    Mutant(
        "relay payloads unsealed",
        V + "transports/relay.py",
        "data = json.loads(crypto.unseal(self._key, sealed, CHANNEL.encode()))",
        "data = json.loads(payload)",
        STATE_TESTS,
        select="postgres",
    ),
    Mutant(
        "relay replays",
        V + "transports/relay.py",
        "or event.id in self._seen:",
        ":",
        STATE_TESTS,
        select="postgres",
    ),
    Mutant(
        "upgrade signs what the chain does not vouch for",
        V + "audit/upgrade.py",
        "changes = None if disagreement else _changes(table, row, ring, fingerprint_key)",
        "changes = _changes(table, row, ring, fingerprint_key)",
        ("tests/test_upgrade.py",),
    ),
    Mutant(
        "purge keeps the public half",
        V + "store/shredding.py",
        '    "public_config": "{}",\n',
        "",
        STATE_TESTS,
    ),
    Mutant(
        "a shared home is accepted",
        V + "bootstrap.py",
        "if mode & 0o077:",
        "if False:",
        STATE_TESTS,
    ),
    Mutant(
        "the env key document stays in the environment",
        V + "keys/providers/base.py",
        "value = os.environ.pop(variable, None)",
        "value = os.environ.get(variable)",
        (*STATE_TESTS, "tests/providers/test_local_providers.py"),
    ),
    # -- principal scopes (issue 15) ---------------------------------------------------------
    Mutant(
        "scope: a principal scope id opens as a session",
        V + "core/vault.py",
        "            or principal_of(session_id) is not None\n",
        "",
        SCOPE_TESTS,
    ),
    Mutant(
        "scope: the principal's pointer wins over the session's",
        VERSIONS,
        "if scope == session_id or name not in found:",
        "if scope != session_id or name not in found:",
        SCOPE_TESTS,
    ),
    Mutant(
        "scope: the principal's version wins over the session's",
        VERSIONS,
        "if record.session_id == session_id or record.toolkit_name not in found:",
        "if record.session_id != session_id or record.toolkit_name not in found:",
        SCOPE_TESTS,
    ),
    Mutant(
        "scope: a new session initializes nothing",
        V + "core/vault.py",
        "            self.store.create_session(session_id, principal.principal_id)\n",
        "            self.store.create_session(session_id, principal.principal_id)\n"
        "            return session_id, []\n",
        SCOPE_TESTS,
    ),
    Mutant(
        "scope: live sessions ignore a principal reconfigure",
        V + "core/push.py",
        "            self._on_principal_scope(principal_id, event.toolkit_name)\n",
        "",
        SCOPE_TESTS,
    ),
    Mutant(
        "scope: a reconfigure initializes every HTTP session again",
        V + "core/push.py",
        "if any(p.pushes and p.principal.principal_id == principal_id for p in plugins)",
        "if any(p.principal.principal_id == principal_id for p in plugins)",
        SCOPE_TESTS,
    ),
    Mutant(
        "scope: a list ignores what other processes changed",
        V + "core/listing.py",
        "            self._sync(session_id, principal.principal_id)\n",
        "            pass\n",
        SCOPE_TESTS,
    ),
    Mutant(
        "scope: a session purge does not fall back to the principal",
        V + "core/upkeep.py",
        "        if self._known(session_id) and report.principal_id is not None:",
        "        if False:",
        SCOPE_TESTS,
    ),
    Mutant(
        "scope: purge --session takes a principal scope",
        V + "core/purge.py",
        "    if principal_of(session) is not None:\n        raise VaultError",
        "    if False:\n        raise VaultError",
        SCOPE_TESTS,
    ),
    Mutant(
        "scope: a stale read replaces a newer instance",
        V + "core/instances.py",
        "if had is not None and (None if held is None else held.source) != had.get(name):",
        "if False:",
        SCOPE_TESTS,
    ),
    Mutant(
        "scope: the principal scope's row unaudited",
        STORAGE,
        "                self.audit(conn, made)\n",
        "",
        SCOPE_TESTS,
    ),
    # -- operator actions without a shell (issue 37) -------------------------------------------
    Mutant(
        "an operator may revoke their own token",
        V + "core/operators.py",
        "    if target.principal_id == actor.principal_id:\n        raise OwnToken",
        "    if False:\n        raise OwnToken",
        (OPERATOR_API + "test_a_revoke_needs_its_confirmation_and_never_takes_ones_own_token",),
    ),
    Mutant(
        "a revoke needs no confirmation",
        V + "core/operators.py",
        "if confirm is None or confirm not in (target.name, target.principal_id):",
        "if False:",
        (OPERATOR_API + "test_a_revoke_needs_its_confirmation_and_never_takes_ones_own_token",),
    ),
    Mutant(
        "a purge needs no confirmation",
        V + "core/operators.py",
        "    if confirm != target.named:",
        "    if False:",
        (OPERATOR_API + "test_a_purge_needs_its_confirmation_which_names_what_it_destroys",),
    ),
    *(
        Mutant(
            f"{what} audited as the command line's operator, not the signed-in one",
            V + "core/operators.py",
            find,
            find.replace("actor.principal_id", '"operator"'),
            (OPERATOR_API + test,),
        )
        for what, find, test in (
            (
                "a created token",
                "store, role, name, actor=actor.principal_id, ttl=seconds, now=now",
                "test_a_created_token_works_at_once_and_is_in_no_log_line_nor_audit_event",
            ),
            (
                "a revoke",
                "revoke(store, target.principal_id, actor=actor.principal_id)",
                "test_a_revoke_needs_its_confirmation_and_never_takes_ones_own_token",
            ),
            (
                "a purge",
                "vault.purge(actor.principal_id, str(target.session), target.toolkit)",
                "test_a_purge_needs_its_confirmation_which_names_what_it_destroys",
            ),
        )
    ),
    Mutant(
        "an intake link asked for by the console or API audited as its agent",
        V + "core/operators.py",
        "answer = intake.request(actor, scope_id, toolkit, request)",
        'answer = intake.request(Principal("local", "agent"), scope_id, toolkit, request)',
        (OPERATOR_API + "test_an_intake_link_for_a_session_or_an_agent_configures_it",),
    ),
    *(
        Mutant(
            f"/v1 {route} open to auditors",
            V + "transports/http_operator.py",
            f"body: {model}, {rest}Depends(guards.as_operator)",
            f"body: {model}, {rest}Depends(guards.as_auditor)",
            (OPERATOR_API + "test_auditors_and_agents_are_refused_every_operator_action",),
        )
        for route, model, rest in (
            ("token creation", "TokenIn", "response: Response, actor: Principal = "),
            ("purge", "PurgeIn", "actor: Principal = "),
        )
    ),
    Mutant(
        "a created token's answer may be cached",
        V + "transports/http_operator.py",
        '        response.headers["Cache-Control"] = "no-store"\n',
        "",
        (
            OPERATOR_API
            + "test_a_created_token_works_at_once_and_is_in_no_log_line_nor_audit_event",
        ),
    ),
    Mutant(
        "a token made in the console or API ignores its lifetime",
        V + "core/operators.py",
        "seconds = parse_ttl(ttl) if ttl else None",
        "seconds = None",
        (
            OPERATOR_API
            + "test_a_created_token_works_at_once_and_is_in_no_log_line_nor_audit_event",
        ),
    ),
    Mutant(
        "the console's operator actions skip the CSRF and origin check",
        V + "transports/web/console.py",
        "        form = await self.posted(request)\n        if isinstance(form, Response):\n"
        "            return form\n        return user, form",
        "        form = await read_form(request)\n        return user, form",
        (OPERATOR_BROWSER + "test_a_post_without_its_confirmation_or_csrf_changes_nothing",),
    ),
    Mutant(
        "the console's operator actions open to auditors",
        V + "transports/web/console.py",
        'console page."""\n        user = await self.signed_in(request, "operator")',
        'console page."""\n        user = await self.signed_in(request, "operator", "auditor")',
        (OPERATOR_BROWSER + "test_auditors_and_agents_are_refused_every_operator_action",),
    ),
    # -- bounds ------------------------------------------------------------------------------
    Mutant(
        "inspect input bound",
        "toolkit_package/inspect_command.py",
        "    if len(data) > MAX_INPUT_BYTES:\n        raise ImportRefused",
        "    if False:\n        raise ImportRefused",
        ("tests/package/test_inspect.py",),
        also=(("toolkit_package/jsonbound.py", "if len(data) > max_bytes:", "if False:"),),
    ),
    Mutant(
        "inspect report bound",
        "toolkit_package/inspect_command.py",
        "if len(encoded) > MAX_REPORT_BYTES:",
        "if False:",
        ("tests/package/test_inspect.py",),
    ),
    # -- the classifier and imports (issue 38) -------------------------------------------------
    Mutant(
        "classifier: a name that names a credential is not secret",
        "toolkit_package/classify.py",
        "    if (word := credential_word(e.name)) is not None:\n"
        '        return Verdict(True, f"credential name: {word}")',
        '    if False:\n        return Verdict(True, "")',
        ("tests/package/test_classifier_corpus.py",),
    ),
    Mutant(
        "classifier: every *_KEY is taken for a key that names a thing",
        "toolkit_package/classify.py",
        'if word == "key" and len(found) >= 2 and found[-1] == "key" and found[-2] in _KEYED:',
        'if word == "key" and len(found) >= 2 and found[-1] == "key":',
        ("tests/package/test_classifier_corpus.py",),
    ),
    Mutant(
        "imports: a secret input keeps its published default",
        "toolkit_package/imported.py",
        "    if secret or value is None:\n        return None",
        "    if value is None:\n        return None",
        (
            "tests/package/test_importers.py::test_import_result_holds_no_value",
            "tests/package/test_import_meaning.py",
        ),
        also=(
            (
                "toolkit_package/toolkit.py",
                "if item.default is not None and not item.secret:",
                "if item.default is not None:",
            ),
        ),
    ),
    Mutant(
        "imports: a credential written into a client config's args is neither held nor reported",
        "toolkit_package/clients.py",
        "if (found := argv_credential(args, i)) is not None:",
        "if False and (found := argv_credential(args, i)) is not None:",
        ("tests/package/test_argv_credentials.py",),
    ),
    Mutant(
        "imports: a published argument holding a credential is named by its value",
        "toolkit_package/server_json.py",
        '            name = name.split(" ", 1)[0] if name.startswith("-") else f"argument-{i}"',
        "            pass",
        ("tests/package/test_argv_credentials.py",),
    ),
    # -- audit devices (issue 37) ----------------------------------------------------------
    Mutant(
        "audit devices: fail-closed commits a write no device accepted",
        DEVICES,
        "            self._refuse(first, len(events), reasons)",
        "            pass",
        (FAIL_CLOSED_TEST,),
    ),
    Mutant(
        "audit devices: fail-open refuses a write no device accepted",
        DEVICES,
        "answered = threading.Semaphore(0) if self.fail_closed else None",
        "answered = threading.Semaphore(0)",
        (DEVICE_TESTS + "test_fail_open_carries_on_and_logs_the_cursor_without_a_secret",),
    ),
    Mutant(
        "audit devices: events sent after the commit (fail-closed cannot roll back)",
        TRANSACTIONS,
        "                            self.audit_sink(conn.info[_WRITTEN])\n"
        "                    written = conn.info.get(_WRITTEN)\n",
        "                            pass\n"
        "                    written = conn.info.get(_WRITTEN)\n"
        "                    if written and self.audit_sink is not None:\n"
        "                        self.audit_sink(written)\n",
        (FAIL_CLOSED_TEST,),
    ),
    Mutant(
        "audit devices: a write's events sent out of order",
        DEVICES,
        "batches = [Batch(events, lines, answered) for _ in self.devices]",
        "batches = [Batch(events[::-1], lines[::-1], answered) for _ in self.devices]",
        (DEVICE_TESTS + "test_a_soak_reaches_a_file_and_syslog_receivers_in_order_with_no_gap",),
    ),
    Mutant(
        "audit devices: only a write's last event sent (a gap)",
        TRANSACTIONS,
        "self.audit_sink(conn.info[_WRITTEN])",
        "self.audit_sink(conn.info[_WRITTEN][-1:])",
        (DEVICE_TESTS + "test_a_soak_reaches_a_file_and_syslog_receivers_in_order_with_no_gap",),
    ),
    Mutant(
        "syslog over TCP: a receiver that closed is not noticed before a send",
        V + "audit/syslog.py",
        'if sock is not None and self.transport == "tcp" and _peer_closed(sock):',
        "if False:",
        (DEVICE_TESTS + "test_a_receiver_restarted_between_two_writes_gets_the_next_one",),
    ),
    Mutant(
        "audit file: SIGHUP does not open the file again",
        TARGETS,
        "if self.reopen_requested or self._fd is None:",
        "if self._fd is None:",
        (DEVICE_TESTS + "test_sighup_reopens_the_file_after_a_rename_and_loses_nothing",),
    ),
    Mutant(
        "audit export: links not verified",
        V + "audit/export.py",
        "if seq != last + 1 or seq > head.seq or not links(sign, previous, event):",
        "if seq != last + 1 or seq > head.seq:",
        (DEVICE_TESTS + "test_export_shapes_and_refuses_an_edited_event",),
    ),
    # -- the audit trail for auditors (issue 37) ----------------------------------------------
    Mutant(
        "audit events: an agent (or no token) reads the trail",
        V + "transports/http_audit.py",
        "        _: Principal = Depends(guards.as_auditor),\n",
        "",
        (TRAIL + "test_an_agent_is_refused_and_a_bad_filter_is_a_422_that_echoes_nothing",),
    ),
    Mutant(
        "audit events: a bad filter's value echoed in the 422",
        V + "transports/http_audit.py",
        "raise _refused(exc.name, exc.reason) from None",
        "raise _refused(exc.name, exc.reason + repr(filters)) from None",
        (TRAIL + "test_an_agent_is_refused_and_a_bad_filter_is_a_422_that_echoes_nothing",),
    ),
    Mutant(
        "audit trail: the principal filter keeps events about another principal",
        V + "store/trail_queries.py",
        "    if query.principal is not None and event.subject != query.principal:\n"
        "        return False",
        "    pass",
        (TRAIL + "test_the_principal_filter_keeps_its_subject_whatever_its_id_spells",),
    ),
    Mutant(
        "audit trail: an action without its sentence",
        V + "audit/wording.py",
        "    AuditAction.TEMPLATE_SET: _template_set,\n",
        "",
        ("tests/test_audit_wording.py",),
    ),
    Mutant(
        "audit trail: a refused configure keeps the config it was sent",
        V + "core/configuring.py",
        'details={"reason": type(exc).__name__, "errors": exc.details},',
        'details={"reason": type(exc).__name__, "errors": exc.details, "sent": msg.config},',
        (TRAIL + "test_a_soaks_secrets_and_tokens_appear_in_no_listed_event",),
    ),
    Mutant(
        "audit trail: a refused intake form keeps what the person typed",
        V + "core/intake.py",
        'details: dict[str, Any] = {"link_id": claim.link_id, "errors": exc.details}',
        'details: dict[str, Any] = {"link_id": claim.link_id, "errors": exc.details, "t": config}',
        (TRAIL + "test_a_soaks_secrets_and_tokens_appear_in_no_listed_event",),
    ),
    Mutant(
        "audit trail: token_created holds the token",
        V + "access/principals.py",
        "        actor=actor,\n        ttl=ttl,\n",
        '        actor=f"{actor} {token}",\n        ttl=ttl,\n',
        (TRAIL + "test_a_soaks_secrets_and_tokens_appear_in_no_listed_event",),
    ),
    Mutant(
        "credential check: a failed check is stored anyway",
        V + "core/configuring.py",
        "ends = self.check_credential(toolkit, msg.config, secrets)  # nothing stored",
        "ends = None",
        (VERIFY + "test_a_check_that_fails_stores_nothing_and_says_why",),
    ),
    Mutant(
        "credential check: the intake form skips it",
        V + "core/intake.py",
        "ends = self.vault.check_credential(view.toolkit, config, secret_values)",
        "ends = None",
        (VERIFY + "test_the_intake_form_shows_the_failed_check_and_the_link_stays_good",),
    ),
    Mutant(
        "credential check: a refused configure audits the config",
        V + "core/configuring.py",
        'details={"reason": "CredentialRejected", "check": exc.message},',
        'details={"reason": "CredentialRejected", "check": exc.message, "c": msg.config},',
        (VERIFY + "test_a_check_that_fails_stores_nothing_and_says_why",),
    ),
    Mutant(
        "credential check: private and loopback addresses allowed",
        V + "addresses.py",
        "_public(each) or any(each in network for network in allow)",
        "True",
        (VERIFY + "test_loopback_and_private_addresses_are_refused_by_default",),
    ),
    Mutant(
        "credential check: redirects followed",
        V + "core/verification.py",
        "follow_redirects=False",
        "follow_redirects=True",
        (VERIFY + "test_a_redirect_is_not_followed",),
    ),
    Mutant(
        "credential check: no deadline",
        V + "core/verification.py",
        "timeout=httpx.Timeout(remaining)",
        "timeout=httpx.Timeout(None)",
        (VERIFY + "test_a_slow_endpoint_is_cut_at_the_deadline",),
        also=(  # the exchange's own timeouts and the bound around it (issue 48): both
            (
                V + "core/verification.py",
                'name="toolkit-verify-http", daemon=True)\n'
                "    worker.start()\n    worker.join(max(0.0, until - time.monotonic()))",
                'name="toolkit-verify-http", daemon=True)\n    worker.start()\n    worker.join()',
            ),
        ),
    ),
    Mutant(
        "credential check: a URL value may add a path",
        V + "core/verification.py",
        'else urllib.parse.quote(text, safe="")',
        "else text",
        (VERIFY + "test_a_url_value_cannot_add_a_path_or_host",),
    ),
    Mutant(
        "credential check: who has a verify is believed for a replaced toolkit too",
        V + "core/verification.py",
        "if known is not None and known[0] is toolkit and not known[1]:",
        "if known is not None and not known[1]:",
        (VERIFY + "test_a_replaced_toolkit_is_looked_at_again",),
    ),
    Mutant(
        "credential check: the request resolves the name again (DNS rebinding)",
        V + "core/verification.py",
        'target = parts._replace(netloc=f"{literal}:{port}").geturl()',
        "target = parts.geturl()",
        (VERIFY + "test_a_name_rebound_to_loopback_after_the_check_is_not_followed",),
    ),
    Mutant(
        "credential check: a plugin's check is waited for forever",
        V + "core/verification.py",
        'name="toolkit-verify", daemon=True)\n'
        "    worker.start()\n    worker.join(max(0.0, until - time.monotonic()))",
        'name="toolkit-verify", daemon=True)\n    worker.start()\n    worker.join()',
        (VERIFY + "test_the_plugin_s_own_check",),
    ),
    Mutant(
        "credential expiry: a credential past its end is initialized anyway",
        V + "core/instance_sync.py",
        "if ends is not None and ends <= self.clock():",
        "if False:",
        (EXPIRY + "test_reminded_once_ahead_then_ended_with_a_status_event_and_a_renewal_link",),
    ),
    Mutant(
        "credential expiry: the toolkit sees the vault's expiry fact",
        V + "core/instance_sync.py",
        "given = without_expiry(without_token_set(config))",
        "given = without_token_set(config)",
        (EXPIRY + "test_an_expiry_the_check_tells_is_kept_listed_and_never_seen_by_the_toolkit",),
    ),
    Mutant(
        "credential expiry: reminded at every round",
        V + "core/reminders.py",
        " and (scope, name, version) not in self._reminded:",
        ":",
        (EXPIRY + "test_reminded_once_ahead_then_ended_with_a_status_event_and_a_renewal_link",),
    ),
    Mutant(
        "intake form: Check now saves the credential",
        V + "transports/web/intake_pages.py",
        'if form.get("action") == "check":',
        "if False:",
        (
            "tests/web/test_templates_checks_browser.py::"
            "test_check_now_says_before_saving_and_the_checks_page_shows_the_last_outcome",
        ),
    ),
    Mutant(
        "templates: a secret field may be a template's",
        V + "core/templates.py",
        "elif schema.is_secret_at([key]):",
        "elif False:",
        (TEMPLATES + "test_a_template_is_checked_against_the_schema_when_set",),
        also=(
            (
                V + "core/templates.py",
                "if key not in public or public[key] != values[key]",
                "if False",
            ),
        ),
    ),
    Mutant(
        "templates: values are not checked against the schema",
        V + "core/templates.py",
        "            schema.validate(dict(values))\n",
        "            pass\n",
        (TEMPLATES + "test_a_template_is_checked_against_the_schema_when_set",),
    ),
    Mutant(
        "templates: a field sent overrides the template",
        V + "core/templates.py",
        "clashes = [k for k, v in values.items() if k in config and config[k] != v]",
        "clashes: list[str] = []",
        (TEMPLATES + "test_the_template_decides_and_a_removed_one_is_refused",),
    ),
    Mutant(
        "templates: a removed template still applies",
        V + "store/ledger.py",
        'self.templates.get(toolkit, {}).pop(str(details.get("name")), None)',
        "pass",
        (TEMPLATES + "test_the_template_decides_and_a_removed_one_is_refused",),
    ),
    Mutant(
        "skeletons: a VS Code input is never a password",
        "toolkit_package/skeletons.py",
        '"password": f.secret,',
        '"password": False,',
        (TEMPLATES + "test_a_skeleton_imports_back_with_every_secret_field_still_secret",),
    ),
    Mutant(
        "skeletons: an MCPB user_config entry is never sensitive",
        "toolkit_package/skeletons.py",
        '"sensitive": f.secret,',
        '"sensitive": False,',
        (TEMPLATES + "test_a_skeleton_imports_back_with_every_secret_field_still_secret",),
    ),
    Mutant(
        "skeletons: a field holding secrets is public",
        V + "core/templates.py",
        "return bool(schema.is_secret_at(list(path))) or _holds_secrets(schema, path)",
        "return bool(schema.is_secret_at(list(path)))",
        (TEMPLATES + "test_a_skeleton_imports_back_with_every_secret_field_still_secret",),
    ),
    Mutant(
        "credential check: a spec plugin's verify is not called",
        V + "plugin.py",
        "if callable(check):  # optional: the credential check before a version is stored",
        "if False:",
        (VERIFY + "test_a_spec_plugin_s_own_check",),
    ),
    Mutant(
        "credential check: x-verify may put a secret in the URL",
        V + "schema/verify_spec.py",
        "if name not in declared or is_secret_at([name]):",
        "if name not in declared:",
        (VERIFY + "test_an_x_verify_that_could_leak_is_refused_at_compile",),
    ),
    # -- OAuth connections (issue 39) ----------------------------------------------------
    Mutant(
        "oauth: refresh without the compare-and-set on the version read",
        V + "core/oauth_refresh.py",
        "configure, after=record.version)",
        "configure)",
        (OAUTH + "test_a_refresh_whose_lease_ran_out_never_overwrites_a_newer_version",),
    ),
    Mutant(
        "oauth: a token set exchanged for a link refused meanwhile left alive at its server",
        V + "core/oauth_connect.py",
        "                revoke_at_server(client, revocation, tokens)\n            raise",
        "                pass\n            raise",
        (OAUTH + "test_a_purge_while_the_code_is_exchanged_voids_the_connection",),
    ),
    Mutant(
        "oauth: a purge leaves the refresh leases of what it shredded",
        V + "store/shredding.py",
        "        drop_leases(conn, scope_id, toolkit)",
        "        pass",
        (OAUTH + "test_a_purge_leaves_no_refresh_lease_of_what_it_shredded",),
    ),
    Mutant(
        "intake: a link used again, or after a newer configure",
        VERSIONS,
        "    if latest != waiting or word.last_version(scope, toolkit) != waiting:",
        "    if False:",
        (
            "tests/web/test_intake.py::test_a_newer_configure_supersedes_the_link",
            "tests/web/test_intake.py::test_two_submissions_of_one_link_store_one_version",
            "tests/web/test_intake.py::test_a_link_configures_the_session_once",
        ),
    ),
    Mutant(
        "intake: a config stored after a purge that landed while it was checked or exchanged",
        VERSIONS,
        "    if word.was_purged(scope, toolkit, waiting):",
        "    if False:",
        (
            OAUTH + "test_a_purge_while_the_code_is_exchanged_voids_the_connection",
            "tests/web/test_intake.py::test_a_purge_while_the_submission_is_checked_voids_it",
        ),
    ),
    Mutant(
        "oauth: a refresh stored after a purge that landed while its server answered",
        VERSIONS,
        "    if not (latest == current == after) or not (\n"
        "        word.last_version(scope, toolkit) == after"
        " and word.pointer(scope, toolkit) == after\n"
        "    ):",
        "    if latest != after:",
        (OAUTH + "test_a_purge_while_the_server_answers_a_refresh_is_not_undone_by_it",),
    ),
    Mutant(
        "oauth: refresh without the lease (every process asks the server)",
        V + "store/leases.py",
        "if row.holder not in (None, holder) and held:",
        "if False:",
        (
            OAUTH
            + "test_fifty_concurrent_initializations_of_an_expired_token_make_one_token_request",
        ),
    ),
    Mutant(
        "oauth: the token request made inside the write transaction",
        V + "core/oauth_refresh.py",
        "new, refused = self._ask(spec, tokens, client_secret)  # no transaction open",
        "with self._store.write():\n"
        "                        new, refused = self._ask(spec, tokens, client_secret)",
        (OAUTH + "test_a_token_request_in_flight_blocks_no_other_write",),
    ),
    Mutant(
        "oauth: a server that keeps failing never hands the connection to a person",
        V + "core/oauth_refresh.py",
        "if failures < MAX_FAILURES:",
        "if True:",
        (OAUTH + "test_a_failing_server_is_retried_spaced_then_a_person_reconnects",),
    ),
    Mutant(
        "oauth: a failing server asked again at once (no backoff)",
        V + "store/leases.py",
        "retry_at = now + spacing * 2 ** (failures - 1)",
        "retry_at = now",
        (OAUTH + "test_a_failing_server_is_retried_spaced_then_a_person_reconnects",),
    ),
    Mutant(
        "oauth: callback state not checked against the flow cookie",
        V + "core/oauth_connect.py",
        "if not state or not hmac.compare_digest(flow.state.encode(), state.encode()):",
        "if not state:",
        (
            OAUTH_BROWSER
            + "test_a_callback_without_the_flow_cookie_or_with_another_state_stores_nothing",
        ),
    ),
    Mutant(
        "oauth: metadata naming another issuer believed",
        V + "oauth/metadata.py",
        'if document.get("issuer") != issuer:',
        "if False:",
        (OAUTH + "test_metadata_that_names_another_issuer_is_refused",),
    ),
    Mutant(
        "oauth: purge without revoking the token set at its server",
        V + "core/upkeep.py",
        "        self._oauth.revoke(actor, scope_id, toolkit_name)\n",
        "        pass\n",
        (OAUTH + "test_purging_a_connection_revokes_its_tokens_at_the_server_first",),
    ),
    Mutant(
        "oauth: the operators' purge command shreds without revoking",
        V + "core/oauth_revoke.py",
        "registry = ToolkitRegistry.default()",
        "registry = ToolkitRegistry()",
        (OAUTH + "test_the_operators_purge_command_revokes_too",),
    ),
    Mutant(
        "oauth: a token refreshed ahead never reaches the live instance",
        V + "core/oauth_schedule.py",
        "                self._reinitialize(scope_id, name)\n",
        "                pass\n",
        (OAUTH + "test_a_live_toolkit_gets_its_token_refreshed_before_it_expires",),
    ),
    Mutant(
        "oauth: a refresh not relayed to the other replicas",
        V + "core/vault.py",
        "        relay = self.push.relay\n        if relay is not None:\n            relay(event)",
        "        return",
        (OAUTH + "test_a_refresh_on_one_replica_reaches_the_live_instances_of_the_others",),
        select="postgres",
    ),
    Mutant(
        "oauth: instances made from a version replaced elsewhere not followed",
        V + "core/oauth_schedule.py",
        "if refreshed or moved:",
        "if refreshed:",
        (OAUTH + "test_a_refresh_on_one_replica_reaches_the_live_instances_of_the_others",),
    ),
    Mutant(
        "oauth: a confidential client's secret not carried to the refreshed version",
        V + "core/oauth_refresh.py",
        "values = new.secrets(spec.token_field) | kept_secrets(spec, client_secret)\n"
        "            public = record.public_config",
        "values = new.secrets(spec.token_field)\n            public = record.public_config",
        (OAUTH + "test_a_confidential_client_sends_its_secret_at_exchange_refresh_and_revocation",),
    ),
    Mutant(
        "oauth: a client secret in the flow cookie unsealed",
        V + "core/oauth_connect.py",
        "sealed = crypto.seal(self._seal, flow.client_secret.encode(), flow.link.encode())",
        "sealed = flow.client_secret.encode()",
        (OAUTH + "test_a_confidential_client_sends_its_secret_at_exchange_refresh_and_revocation",),
        also=(
            (
                V + "core/oauth_connect.py",
                "client_secret = crypto.unseal(self._seal, box, str(link).encode()).decode()",
                "client_secret = box.decode()",
            ),
        ),
    ),
    Mutant(
        "oauth: revocation authenticates otherwise than x-oauth declares",
        V + "oauth/client.py",
        "            revocation_endpoint_auth_method=method,\n",
        "",
        (OAUTH + "test_a_confidential_client_sends_its_secret_at_exchange_refresh_and_revocation",),
    ),
    Mutant(
        "oauth: the plugin gets the whole token set",
        V + "core/instance_sync.py",
        "given = without_expiry(without_token_set(config))",
        "given = without_expiry(config)",
        (OAUTH_BROWSER + "test_connect_in_the_browser_then_the_token_is_used_and_refreshed",),
    ),
    Mutant(
        "oauth: no PKCE",
        V + "oauth/client.py",
        '            code_challenge_method="S256",\n',
        "",
        (OAUTH + "test_a_rotated_refresh_token_replaces_the_old_one",),
    ),
    Mutant(
        "oauth: a connection marked reconnect is used anyway",
        V + "core/oauth_refresh.py",
        "            if tokens.reconnect:\n                raise Reconnect(",
        "            if False:\n                raise Reconnect(",
        (OAUTH + "test_invalid_grant_asks_a_person_to_reconnect_and_never_retries_by_itself",),
    ),
    Mutant(
        "oauth import: protected resource metadata naming another resource believed",
        V + "oauth/resource.py",
        "if not isinstance(resource, str) or not same_resource(resource, url):",
        "if not isinstance(resource, str):",
        (
            "tests/test_import_oauth.py::test_metadata_naming_another_resource_is_refused_with_its_reason",
        ),
    ),
    Mutant(
        "oauth import: an authorization server over plain http believed",
        V + "oauth/resource.py",
        "if servers is None or not all(secure_url(s) for s in servers):",
        "if servers is None:",
        ("tests/test_import_oauth.py::test_an_authorization_server_over_plain_http_is_refused",),
    ),
    Mutant(
        "oauth import: a protected resource document read past 64 KiB",
        V + "oauth/fetch.py",
        "if len(body) > MAX_DOCUMENT:",
        "if False:",
        ("tests/test_import_oauth.py::test_metadata_documents_are_read_up_to_64_kib",),
    ),
    Mutant(
        "oauth: an authorization server's metadata read past 64 KiB",
        V + "oauth/metadata.py",
        "if len(body) > MAX_DOCUMENT:",
        "if False:",
        (IMPORT_OAUTH + "test_the_connect_time_metadata_read_is_bounded_too",),
    ),
    Mutant(
        "oauth import: a remote server's plain http URL to another host asked",
        V + "toolkits/remote_oauth.py",
        "    if not secure_url(url):\n",
        "    if False:\n",
        ("tests/test_import_oauth.py::test_plain_http_to_another_host_is_never_asked",),
    ),
    Mutant(
        "oauth import: an exchange over plain http to another host",
        V + "oauth/fetch.py",
        "    if not secure_url(url):\n",
        "    if False:\n",
        ("tests/test_import_oauth.py::test_plain_http_to_another_host_is_never_asked",),
    ),
    Mutant(
        "oauth import: a redirect followed to metadata the server did not name",
        V + "oauth/fetch.py",
        "follow_redirects=False, trust_env=False",
        "follow_redirects=True, trust_env=False",
        ("tests/test_import_oauth.py::test_a_redirect_is_not_followed",),
    ),
    # -- backups and recovery (issue 40) -------------------------------------------------------
    Mutant(
        "a backup's MAC is not checked",
        BACKUP + "archive.py",
        "if not hmac.compare_digest(claimed, expected):",
        "if False:",
        (BACKUP_TESTS + "test_a_tampered_or_truncated_backup_is_refused_by_verify_and_restore",),
    ),
    Mutant(
        "a backup is written under its final name, not renamed into place",
        BACKUP + "snapshot.py",
        "            with atomic_writer(path) as handle:",
        '            with open(path, "wb") as handle:',
        (BACKUP_TESTS + "test_sigkill_during_create_leaves_no_file_that_verifies",),
    ),
    Mutant(
        "a vault whose state is not believed is backed up",
        BACKUP + "snapshot.py",
        "if (failure := store.state_failure()) is not None:",
        "if (failure := store.state_failure()) is not None and False:",
        (BACKUP_TESTS + "test_a_backup_refuses_a_vault_that_is_not_believed",),
    ),
    Mutant(
        "a backup's own header chooses the master key that verifies it",
        BACKUP + "check.py",
        "        if not trust_header:\n",
        "        if False:\n",
        (
            BACKUP_TESTS
            + "test_a_backup_during_a_soak_restores_every_accepted_configure_once_across_databases",
        ),
    ),
    Mutant(
        "a restore over a newer witness needs no explicit step",
        BACKUP + "restore.py",
        "if ahead and not over_newer_witness:",
        "if False:",
        (RESTORE_TEST,),
    ),
    Mutant(
        "a restore into PostgreSQL leaves its serial keys behind the restored rows",
        V + "store/snapshots.py",
        "            _advance_sequences(conn)\n",
        "",
        (
            BACKUP_TESTS
            + "test_a_backup_during_a_soak_restores_every_accepted_configure_once_across_databases",
        ),
        select="",
    ),
    Mutant(
        "a restore goes into a database that is not empty",
        BACKUP + "restore.py",
        "        if not empty:\n",
        "        if False:\n",
        (RESTORE_TEST,),
    ),
    Mutant(
        "a restore is not audited",
        BACKUP + "restore.py",
        "store.record_attempt(AuditDraft(actor, AuditAction.BACKUP_RESTORED, details=details))",
        "pass",
        (RESTORE_TEST,),
    ),
    Mutant(
        "fewer shares than the threshold are combined anyway",
        V + "keys/recovery.py",
        "if len(decoded) < threshold:",
        "if False:",
        (RECOVERY_TESTS + "test_a_wrong_share_is_named_and_fewer_than_k_recover_nothing",),
    ),
    Mutant(
        "a share of another set is not named",
        V + "keys/recovery.py",
        "if share.common_parameters() != first.common_parameters():",
        "if False:",
        (RECOVERY_TESTS + "test_a_wrong_share_is_named_and_fewer_than_k_recover_nothing",),
    ),
    Mutant(
        "an invalid share's words are echoed",
        V + "keys/recovery.py",
        'f"share {place} is not a valid share',
        'f"share {place} {text} is not a valid share',
        (RECOVERY_TESTS + "test_a_wrong_share_is_named_and_fewer_than_k_recover_nothing",),
    ),
    Mutant(
        "a vault key rotation leaves the new vault key outside the shares",
        V + "keys/rotation.py",
        "cover=cover_vault_key(ring, new_id, key),",
        "cover=None,",
        (RECOVERY_TESTS + "test_the_shares_keep_covering_the_vault_across_vault_key_rotations",),
    ),
    Mutant(
        "a restore with shares keeps the lost master key's wraps",
        BACKUP + "restore.py",
        "unseal(store, shares, provider, actor=actor)",
        "None",
        (
            RECOVERY_TESTS
            + "test_a_backup_restores_with_shares_when_the_master_key_and_the_database_are_gone",
        ),
    ),
    Mutant(
        "unseal keeps the lost master key's wraps",
        V + "keys/recovery.py",
        "rewrap_vault_keys(store, [(key_id, old, new) for key_id, old, new in moves if old]",
        "rewrap_vault_keys(store, [(key_id, old, new) for key_id, old, new in [] if old]",
        (RECOVERY_TESTS + "test_the_drill_kms_key_gone_three_of_five_shares_restore_everything",),
    ),
    Mutant(
        "intake link: its payload readable (base64 JSON naming the session)",
        V + "core/intake.py",
        "payload = _b64(nonce + self._aead().encrypt(nonce, canonical_json(fields), _DOMAIN))",
        "payload = _b64(canonical_json(fields))",
        ("tests/web/test_intake_browser.py::test_a_link_cannot_be_pointed_at_another_session",),
        also=(
            (
                V + "core/intake.py",
                "fields = json.loads(self._aead().decrypt(sealed[:12], sealed[12:], _DOMAIN))",
                "fields = json.loads(sealed)",
            ),
        ),
    ),
    Mutant(
        "intake form: the values the agent chose are not marked",
        V + "transports/web/intake_pages.py",
        "agent_set={f.pointer for f, _ in agent_values},",
        "agent_set=set(),",
        ("tests/web/test_intake_browser.py::test_a_schema_with_every_kind_of_field",),
    ),
    Mutant(
        "intake form: the agent's URLs not listed first",
        V + "transports/web/formdata.py",
        "return sorted(found, key=lambda pair: not _is_url(*pair))",
        "return found",
        (
            "tests/web/test_forms.py::"
            "test_labels_are_readable_names_in_declared_order_secret_fields_last",
        ),
    ),
    # -- PostgreSQL's commit mark (issue 42) ---------------------------------------------------
    Mutant(
        "postgres: a write sends no notice of its commit",
        STATEMENTS,
        "NOTIFY {STATE_CHANNEL}, '{{}}'\"",
        "SELECT '{{}}'\"",
        (NOTICES_TESTS + "test_a_commit_in_another_process_moves_the_mark_by_its_notice",),
        select="postgres",
    ),
    Mutant(
        "postgres: a notice does not move the mark",
        NOTICES,
        "self.moved(foreign=True)\n",
        "pass\n",
        (NOTICES_TESTS + "test_a_commit_in_another_process_moves_the_mark_by_its_notice",),
        select="postgres",
    ),
    Mutant(
        "postgres: a commit here waits for its notice to move the mark",
        TRANSACTIONS,
        "self.notices.moved()  # this process's own commit shows before its notice",
        "pass",
        (NOTICES_TESTS + "test_a_commit_here_moves_the_mark_at_once",),
        select="postgres",
    ),
    Mutant(
        "postgres: the chain is followed by the notices' mark",
        FOLLOWING,
        "mark = self._exact_mark()\n        if ledger.failure is None and (force",
        "mark = self.notices and self.notices.mark()\n        if ledger.failure is None and (force",
        (NOTICES_TESTS + "test_the_chain_is_followed_without_waiting_for_the_notice",),
        select="postgres",
    ),
    Mutant(
        "postgres: a list's mark goes by the notices heard, not the chain head",
        MARKS,
        "return self.notices.exact_mark()",
        "return self.notices.mark()",
        (NOTICES_TESTS + "test_a_commit_elsewhere_shows_in_the_next_list_before_its_notice",),
        select="postgres",
    ),
    Mutant(
        "postgres: a list's mark on the event loop goes by the notices heard",
        MARKS,
        "return await self.notices.exact_mark_on_loop()",
        "return self.notices.mark()",
        (NOTICES_TESTS + "test_a_commit_elsewhere_shows_in_the_next_list_before_its_notice",),
        select="postgres",
    ),
    Mutant(
        "postgres: a list's head read on the event loop waits as long as the network",
        NOTICES,
        "reader.head_row(self._conninfo), HEAD_READ_S)",
        "reader.head_row(self._conninfo), None)",
        (NOTICES_TESTS + "test_a_head_read_that_hangs_is_given_up",),
        select="",
    ),
    Mutant(
        "postgres: the head read for a list's mark moves only the notices' mark",
        NOTICES,
        "                self._foreign += not held\n        return head",
        "                pass\n        return head",
        (NOTICES_TESTS + "test_a_commit_elsewhere_shows_in_the_next_list_before_its_notice",),
        select="postgres",
    ),
    Mutant(
        "postgres: a lost LISTEN connection is believed",
        NOTICES,
        "self._checked = None",
        "pass",
        (NOTICES_TESTS + "test_a_lost_connection_is_not_believed_and_a_new_one_moves_the_mark",),
        select="postgres",
    ),
    Mutant(
        "postgres: a reconnection does not move the mark",
        NOTICES,
        "if head != moved:",
        "if False:",
        (NOTICES_TESTS + "test_a_lost_connection_is_not_believed_and_a_new_one_moves_the_mark",),
        select="postgres",
    ),
    Mutant(
        "postgres: a mark not checked lately is believed",
        NOTICES,
        "if checked is None or time.monotonic() - checked > STALE_S:",
        "if checked is None:",
        (NOTICES_TESTS + "test_a_mark_not_checked_lately_is_not_believed",),
        select="postgres",
    ),
    Mutant(
        "postgres: this process's own notices taken for another's",
        NOTICES,
        "if notice.payload != self.token:",
        "if True:",
        (NOTICES_TESTS + "test_commits_here_keep_the_ledger_current_without_a_read",),
        select="postgres",
    ),
    Mutant(
        "a commit here waits for a read to enter the ledger",
        V + "store/ledger.py",
        "                    self.state.apply(event)\n                    self.applied, self._a",
        "                    pass\n                    self.applied, self._a",
        (NOTICES_TESTS + "test_commits_here_keep_the_ledger_current_without_a_read",),
        select="postgres",
    ),
    Mutant(
        "postgres: the ledger believed current after another process committed",
        FOLLOWING,
        "if foreign is None or foreign != self._followed_mark:",
        "if foreign is None:",
        (NOTICES_TESTS + "test_a_commit_elsewhere_is_read_before_a_list_is_answered_from_memory",),
        select="postgres",
    ),
    Mutant(
        "postgres: a head no notice explains is believed held",
        NOTICES,
        "self._foreign += not held",
        "pass",
        (NOTICES_TESTS + "test_a_commit_elsewhere_without_its_notice_is_caught_by_the_head_check",),
        select="postgres",
    ),
    Mutant(
        "postgres: a group's appends each read their own state",
        TRANSACTIONS,
        "if len(keys) < len(group):",
        "if True:",
        ("tests/test_storage.py::test_a_group_of_appends_reads_their_states_in_one_statement",),
        select="postgres",
    ),
    Mutant(
        "postgres: a group's appends each read their import's package",
        TRANSACTIONS,
        "        conn.info[_IMPORTS_AHEAD] = {row[1]: row[-1] for row in rows}",
        "        pass",
        ("tests/test_storage.py::test_a_group_of_appends_reads_their_states_in_one_statement",),
        select="postgres",
    ),
    Mutant(
        "postgres: a group's later appends take the chain's end as read ahead",
        VERSIONS,
        "        if not written:\n            return found\n",
        "        if True:\n            return found\n",
        ("tests/test_storage.py::test_a_group_of_appends_reads_their_states_in_one_statement",),
        select="postgres",
    ),
    Mutant(
        "postgres: a second append to one key in a group takes the state read ahead",
        VERSIONS,
        "        ahead[key] = (version, primary, version if live else current)",
        "        pass",
        ("tests/test_storage.py::test_a_group_of_appends_reads_their_states_in_one_statement",),
        select="postgres",
    ),
    Mutant(
        "postgres: a pipelined group's compare-and-sets are not checked",
        TRANSACTIONS,
        "_moved_one(conn, cursor, at_sync=True)",
        "pass",
        (
            "tests/test_storage.py::"
            "test_a_pointer_moved_under_a_pipelined_group_fails_it_and_it_is_written_again",
        ),
        select="postgres",
    ),
    Mutant(
        "a batch of the first walk is checked as if it ended the chain",
        FOLLOWING,
        "partial = len(rows) > FOLLOW_BATCH  # the head's row and a full batch",
        "partial = False",
        ("tests/test_storage.py::test_a_first_walk_reads_the_chain_in_batches",),
    ),
    Mutant(
        "the ledger checks a batch's end as a whole read's",
        V + "store/ledger.py",
        "        if partial:\n            return\n        stored = 0",
        "        stored = 0",
        ("tests/test_storage.py::test_a_first_walk_reads_the_chain_in_batches",),
    ),
    Mutant(
        "postgres: a failed write is not doubted",
        TRANSACTIONS,
        "self.notices.moved(foreign=True)  # it may have committed all the same, unheard",
        "pass",
        (NOTICES_TESTS + "test_a_write_that_fails_is_doubted",),
        select="postgres",
    ),
    # -- issue 48: the address policy, and import-time discovery's reach --
    Mutant(
        "address policy: the IPv4 address an IPv6 spelling carries is not judged",
        V + "addresses.py",
        "    carried = carried_ipv4(address)\n",
        "    carried: tuple[ipaddress.IPv4Address, ...] = ()\n",
        (ADDRESSES,),
    ),
    Mutant(
        "address policy: NAT64 and IPv4-compatible spellings not unwrapped",
        V + "addresses.py",
        "for network in (*_IPV4_ITSELF, _NAT64, _LOCAL_NAT64)):",
        "for network in _IPV4_ITSELF[:1]):",
        (ADDRESSES,),
    ),
    Mutant(
        "address policy: 6to4 not unwrapped",
        V + "addresses.py",
        "    if address.sixtofour is not None:",
        "    if False:",
        (ADDRESSES,),
    ),
    Mutant(
        "oauth import: a loopback or private remote asked without --allow-private",
        V + "oauth/fetch.py",
        "if not addresses or not (allow_private or all(permitted(a) for a in addresses)):",
        "if not addresses:",
        (
            IMPORT_OAUTH + "test_a_loopback_remote_is_not_asked_without_allow_private",
            IMPORT_OAUTH + "test_each_import_time_exchange_refuses_a_loopback_address",
        ),
    ),
    Mutant(
        "oauth import: one public answer of a name is enough",
        V + "oauth/fetch.py",
        "all(permitted(a) for a in addresses)",
        "any(permitted(a) for a in addresses)",
        (IMPORT_OAUTH + "test_a_loopback_remote_is_not_asked_without_allow_private",),
    ),
    Mutant(
        "oauth import: the request resolves the name again (DNS rebinding)",
        V + "oauth/fetch.py",
        'target = parts._replace(netloc=f"{literal}:{port}").geturl()',
        "target = url",
        (IMPORT_OAUTH + "test_the_connection_goes_to_the_address_that_was_checked",),
    ),
    Mutant(
        "oauth import: the authorization server's metadata read from any address",
        V + "oauth/registration.py",
        'answer = fetch("GET", url, deadline=deadline, allow_private=allow_private)',
        'answer = fetch("GET", url, deadline=deadline, allow_private=True)',
        (IMPORT_OAUTH + "test_each_import_time_exchange_refuses_a_loopback_address",),
    ),
    Mutant(
        "oauth import: the report tells a closed port from an open one",
        V + "oauth/fetch.py",
        "    except (httpx.HTTPError, httpx.InvalidURL):\n"
        "        raise unreachable(host) from None",
        "    except (httpx.HTTPError, httpx.InvalidURL) as exc:\n"
        '        raise OAuthFailed("unavailable", f"{host}: {type(exc).__name__}") from None',
        (IMPORT_OAUTH + "test_every_unreachable_target_reads_the_same",),
    ),
    Mutant(
        "oauth import: the report tells a document that cannot be read from no server",
        V + "oauth/resource.py",
        'raise unreachable(urlsplit(where).hostname or "?")',
        'raise OAuthFailed("unavailable", f"cannot be read (HTTP {answer.status})")',
        (IMPORT_OAUTH + "test_every_unreachable_target_reads_the_same",),
    ),
    # -- issue 48: OAuth issuer mix-up ------------------------------------------------------
    Mutant(
        "oauth mix-up: one redirect URI for every authorization server",
        V + "core/oauth_connect.py",
        "back = redirect_uri(callback, spec)",
        "back = callback",
        (
            MIXUP + "test_a_hostile_issuer_forwarding_to_an_honest_one_gets_no_code_redeemed",
            MIXUP + "test_redirect_uris_differ_per_issuer_and_stay_under_the_callback",
        ),
    ),
    Mutant(
        "oauth mix-up: an answer taken at another server's callback",
        V + "core/oauth_connect.py",
        "        if not hmac.compare_digest(self.redirect_uri.encode(), reached.encode()):",
        "        if False:",
        (
            MIXUP + "test_a_hostile_issuer_forwarding_to_an_honest_one_gets_no_code_redeemed",
            MIXUP + "test_an_answer_at_another_issuers_callback_is_refused",
        ),
    ),
    Mutant(
        "oauth mix-up: an iss naming another issuer believed (RFC 9207)",
        V + "core/oauth_connect.py",
        '                return "iss"\n',
        "                pass\n",
        (
            MIXUP + "test_a_hostile_issuer_forwarding_to_an_honest_one_gets_no_code_redeemed",
            MIXUP + "test_the_iss_parameter_must_name_the_flows_issuer",
        ),
    ),
    Mutant(
        "oauth mix-up: an iss advertised and left out accepted (RFC 9207)",
        V + "core/oauth_connect.py",
        '            return "iss_missing"\n',
        "            pass\n",
        (MIXUP + "test_the_iss_parameter_must_name_the_flows_issuer",),
    ),
    Mutant(
        "oauth mix-up: the code exchanged with a server other than the flow's",
        V + "core/oauth_connect.py",
        "        if not self._same_server(flow, spec, found):",
        "        if False:",
        (MIXUP + "test_the_code_goes_only_to_the_token_endpoint_the_flow_started_with",),
    ),
    # -- issue 48: audit devices (a receiver that never reads, bounded events, symlinks) --
    Mutant(
        "audit devices: sent under the chain's lock (no queue)",
        DEVICES,
        "            device.put(batch)\n",
        "            batch.finish(device.send(batch.events, batch.lines))\n",
        (
            DEVICE_TESTS
            + "test_a_receiver_that_never_reads_stalls_no_bystander_and_its_losses_are_counted",
        ),
    ),
    Mutant(
        "audit devices: a device's queue is unbounded",
        DEVICES,
        "if self.queued + batch.count > self.capacity:",
        "if False:",
        (DEVICE_TESTS + "test_a_full_queue_drops_a_writes_events_and_counts_and_logs_them",),
    ),
    Mutant(
        "audit events: an event's details unbounded",
        V + "store/records.py",
        "    text = json.dumps(details)\n    if len(text) <= DETAILS_MAX_BYTES:",
        "    text = json.dumps(details)\n    if True:",
        (DEVICE_TESTS + "test_an_agents_config_makes_a_bounded_event",),
    ),
    Mutant(
        "audit devices: fail-closed does not wait for a device to take the events",
        DEVICES,
        "answered = threading.Semaphore(0) if self.fail_closed else None",
        "answered = None",
        (DEVICE_TESTS + "test_fail_closed_answers_ok_only_for_what_the_receiver_took",),
    ),
    Mutant(
        "syslog over TCP: a timed-out send retried on a new connection (a false ok)",
        V + "audit/syslog.py",
        "        except TimeoutError:\n            raise",
        "        except TimeoutError:\n"
        "            self.close()\n"
        "            self._stream(self._connected(), [frame(m) for m in messages])",
        (DEVICE_TESTS + "test_fail_closed_answers_ok_only_for_what_the_receiver_took",),
    ),
    Mutant(
        "syslog over TCP: a stuck receiver is sent more before it took what it had",
        V + "audit/syslog.py",
        "            if held:\n",
        "            if False:\n",
        (DEVICE_TESTS + "test_fail_closed_answers_ok_only_for_what_the_receiver_took",),
    ),
    Mutant(
        "audit file: a symlink made after the start is followed (no O_NOFOLLOW)",
        TARGETS,
        "os.O_CLOEXEC | os.O_NOFOLLOW",
        "os.O_CLOEXEC",
        (DEVICE_TESTS + "test_a_symlinked_file_device_is_refused",),
    ),
    Mutant(
        "audit file: a symlink at its path is not refused at start",
        TARGETS,
        "    if stat.S_ISLNK(info.st_mode):\n",
        "    if False:\n",
        (DEVICE_TESTS + "test_a_symlinked_file_device_is_refused",),
    ),
    # -- issue 48: logs and credential checks --------------------------------------------
    Mutant(
        "issue 48: an incoming secret is not registered for redaction when it is split",
        V + "schema/split.py",
        "        register_secrets(secrets.values())\n        if len(secrets) > MAX_SECRETS:",
        "        if len(secrets) > MAX_SECRETS:",
        (VERIFY_LOGS + "test_an_incoming_secret_is_redacted_from_the_moment_it_is_split",),
    ),
    Mutant(
        "issue 48: the HTTP client loggers are not held at WARNING",
        V + "logs.py",
        "        logging.getLogger(name).setLevel(logging.WARNING)",
        "        logging.getLogger(name).setLevel(logging.NOTSET)",
        (
            VERIFY_LOGS + "test_serve_logs_no_verify_secret_and_no_request_url",
            VERIFY_LOGS + "test_stdio_logs_no_verify_secret_and_no_request_url",
        ),
    ),
    Mutant(
        "issue 48: a credential check's deadline is per read again, not total",
        V + "core/verification.py",
        '    worker = threading.Thread(target=run, name="toolkit-verify-http", daemon=True)\n'
        "    worker.start()\n    worker.join(max(0.0, until - time.monotonic()))",
        '    worker = threading.Thread(target=run, name="toolkit-verify-http", daemon=True)\n'
        "    worker.start()\n    worker.join()",
        (VERIFY_DEADLINE + "test_a_dripping_answer_is_cut_at_the_total_deadline",),
    ),
    Mutant(
        "issue 48: a configure that waits on a check runs on the workers every agent needs",
        V + "transports/a2e/lanes.py",
        "        return self.checking if self.vault.waits_on_a_check(message) else self.a2e",
        "        return self.a2e",
        (VERIFY_DEADLINE + "test_drip_checks_in_flight_do_not_stall_another_agent",),
    ),
    Mutant(
        "issue 48: a check beyond the cap in flight waits instead of being refused",
        V + "core/verification.py",
        "        if not self._free.acquire(blocking=False):",
        "        if not self._free.acquire():",
        (VERIFY_DEADLINE + "test_a_check_beyond_the_cap_is_refused_at_once",),
    ),
    # -- issue 48: restore and recovery --
    Mutant(
        "a restore over another vault's home is not refused",
        BACKUP + "restore.py",
        "        if report.other_vault:\n",
        "        if False:\n",
        (BACKUP_TESTS + "test_a_backup_of_another_vault_with_the_same_master_key_is_refused",),
    ),
    Mutant(
        "a restore compares the witnessed seq only, not the backup's MAC there (a fork passes)",
        BACKUP + "restore.py",
        "and (verified.mac_at is None or not hmac.compare_digest(verified.mac_at, newest[1]))",
        "and False",
        (BACKUP_TESTS + "test_a_fork_is_refused_and_only_restored_on_purpose_named_as_a_fork",),
    ),
    Mutant(
        "a fork restored on purpose is not named as one in its audit event",
        BACKUP + "restore.py",
        '"fork": fork,',
        '"fork": False,',
        (BACKUP_TESTS + "test_a_fork_is_refused_and_only_restored_on_purpose_named_as_a_fork",),
    ),
    Mutant(
        "a recovery wrap is believed without opening it",
        AUDIT,
        "return recovery_wrap_opens(recovery, row)",
        "return True",
        (RECOVERY_TESTS + "test_a_flipped_byte_in_a_recovery_wrap_is_reported_before_a_disaster",),
    ),
    Mutant(
        "a replaced share set's wraps are not held to the chain's current set",
        RECONCILE,
        "elif row.set_id != current:",
        "elif False:",
        (
            RECOVERY_TESTS
            + "test_a_replaced_share_sets_rows_put_back_are_refused_and_its_shares_do_not_unseal",
        ),
    ),
    Mutant(
        "a deleted recovery wrap is not reported",
        RECONCILE,
        "for key_id in sorted(expected - present):",
        "for key_id in ():",
        (
            RECOVERY_TESTS
            + "test_a_deleted_recovery_wrap_is_reported_and_status_warns_of_the_uncovered_key",
        ),
    ),
    Mutant(
        "shares of a replaced set put back unseal the vault",
        V + "keys/recovery.py",
        "    _current_per_chain(store)\n",
        "",
        (
            RECOVERY_TESTS
            + "test_a_replaced_share_sets_rows_put_back_are_refused_and_its_shares_do_not_unseal",
        ),
    ),
    Mutant(
        "recovery status does not warn of an uncovered live vault key",
        BACKUP + "recovery.py",
        'if status["initialized"] or problems:',
        "if False:",
        (
            RECOVERY_TESTS
            + "test_a_deleted_recovery_wrap_is_reported_and_status_warns_of_the_uncovered_key",
        ),
    ),
    # -- issue 48: the vault's own state (item 7) --
    Mutant(
        "witness: followed through a symlink",
        V + "files.py",
        "flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC",
        "flags | os.O_NONBLOCK | os.O_CLOEXEC",
        (EDGES + "test_a_symlinked_witness_is_refused_and_never_written_through",),
        also=((V + "store/witness.py", "if stat.S_ISLNK(info.st_mode):", "if False:"),),
    ),
    Mutant(
        "witness: a file others may write is believed",
        V + "files.py",
        "        if info.st_mode & 0o077:",
        "        if False:",
        (EDGES + "test_a_witness_that_is_not_a_private_file_is_neither_read_nor_written",),
        select="0644",
    ),
    Mutant(
        "witness: another user's file is believed",
        V + "files.py",
        "        if info.st_uid != os.getuid():",
        "        if False:",
        (EDGES + "test_a_witness_that_is_not_a_private_file_is_neither_read_nor_written",),
        select="owner",
    ),
    Mutant(
        "witness: a file that is not regular is read",
        V + "files.py",
        "        if not stat.S_ISREG(info.st_mode):",
        "        if False:",
        (EDGES + "test_a_witness_that_is_not_a_private_file_is_neither_read_nor_written",),
        select="directory",
    ),
    Mutant(
        "witness: a damaged slot is not logged",
        FOLLOWING,
        'log.warning("%s", damage)',
        "pass",
        (EDGES + "test_a_damaged_witness_slot_is_said_aloud",),
    ),
    Mutant(
        "witness: audit verify does not say a damaged slot",
        AUDIT,
        "witness_warning=_witness_damage(store),",
        "witness_warning=None,",
        (EDGES + "test_a_damaged_witness_slot_is_said_aloud",),
    ),
    Mutant(
        "witness: readiness does not say a damaged slot",
        V + "transports/http_api.py",
        "damaged = vault.store.witness_damage() is not None",
        "damaged = False",
        (EDGES + "test_a_damaged_witness_slot_is_said_aloud",),
    ),
    Mutant(
        "witness: a torn slot is not counted as damage",
        FOLLOWING,
        "damaged = self.witness.torn",
        "damaged = 0",
        (EDGES + "test_a_damaged_witness_slot_is_said_aloud",),
        select="torn and not postgres",
    ),
    Mutant(
        "witness: a slot whose MAC fails is not counted as damage",
        FOLLOWING,
        "                if not hmac.compare_digest(head_link(sign, seq, mac), head_mac)\n",
        "                if False\n",
        (EDGES + "test_a_damaged_witness_slot_is_said_aloud",),
        select="mac and not postgres",
    ),
    Mutant(
        "a configure does not re-check its principal in the write",
        VERSIONS,
        "if principal is not None and (ended := self._principal_ended(conn, principal)):",
        "if False:",
        (EDGES + "test_a_configure_whose_token_ends_meanwhile_stores_nothing",),
        select="revoked",  # SQLite and PostgreSQL (its pipelined groups)
    ),
    Mutant(
        "a configure's re-check ignores an expiry",
        VERSIONS,
        "        if row[1] is not None and time.time() >= row[1]:",
        "        if False:",
        (EDGES + "test_a_configure_whose_token_ends_meanwhile_stores_nothing",),
        select="expired and not postgres",
    ),
    Mutant(
        "an ended principal's refusal is answered RUNTIME_ERROR",
        V + "core/connection.py",
        "    if isinstance(exc, PrincipalEnded):",
        "    if False:",
        (EDGES + "test_a_configure_whose_token_ends_meanwhile_stores_nothing",),
        select="revoked and not postgres",
    ),
    Mutant(
        "a configure may carry the vault's reserved keys",
        V + "core/configuring.py",
        "            refuse_reserved(msg.config)  # an expiry or token set is the vault's to write",
        "            pass",
        (EDGES + "test_a_config_carrying_a_reserved_key_is_refused",),
    ),
    Mutant(
        "an intake form may carry the vault's reserved keys",
        V + "core/intake.py",
        "            refuse_reserved(config)  # the vault's own keys, never a person's",
        "            pass",
        (EDGES + "test_an_intake_form_carrying_a_reserved_key_is_refused",),
    ),
    Mutant(
        "key-less commands: a database behind its witness is not said",
        FOLLOWING,
        "        if (last or 0) < seq:\n            return behind(seq, last or 0)",
        "        if False:\n            return None",
        (EDGES + "test_key_less_commands_say_the_database_is_behind_its_witness",),
    ),
    Mutant(
        "key-less commands: another event at the witnessed head is not said",
        FOLLOWING,
        "        if stored is None or not hmac.compare_digest(bytes(stored), mac):",
        "        if False:",
        (EDGES + "test_key_less_commands_say_another_event_at_the_witnessed_head",),
    ),
    # -- issue 50: the plugin side of tool/call (tools declared, schemas checked, the root) --
    Mutant(
        "issue 50: a tool's input schema is not checked at registration",
        V + "toolkits/registry.py",
        "            registered._input_schemas  # noqa: B018\n",
        "",
        (
            TOOL_PLUGINS + "test_a_hostile_input_schema_refuses_the_toolkit_at_registration",
            TOOL_PLUGINS
            + "test_a_spec_plugins_toolkit_with_a_hostile_input_schema_is_left_out_alone",
        ),
    ),
    Mutant(
        "issue 50: an imported bundle's tool schema is stored unchecked",
        V + "toolkits/imports.py",
        "        compile_tool_schemas(complete_tools(definition, imported.tools))",
        "        complete_tools(definition, imported.tools)",
        (TOOL_PLUGINS + "test_a_bundle_whose_tool_schema_the_vault_cannot_run_is_skipped",),
    ),
    Mutant(
        "issue 50: a plugin declares a tool its definition does not list",
        V + "toolkits/tool_declarations.py",
        "        if tool.name not in listed:",
        "        if False:",
        (TOOL_PLUGINS + "test_declarations_describe_listed_names_and_add_none",),
    ),
    Mutant(
        "issue 50: a filesystem call follows a symlink out of the root",
        V + "toolkits/filesystem.py",
        "        if not candidate.is_relative_to(root):\n"
        "            raise PathRefused(UNAVAILABLE)",
        "        pass",
        (TOOL_PLUGINS + "test_a_path_outside_the_root_is_an_error_result_that_echoes_nothing",),
    ),
    Mutant(
        "issue 50: a filesystem call climbing out as written is resolved first",
        V + "toolkits/filesystem.py",
        "if os.path.isabs(written) or written.split(os.sep)[0] == os.pardir:",
        "if os.path.isabs(written):",
        (TOOL_PLUGINS + "test_a_path_outside_the_root_is_an_error_result_that_echoes_nothing",),
    ),
    Mutant(
        "issue 50: a cancelled filesystem call still writes",
        V + "toolkits/filesystem.py",
        "        if context.cancelled.is_set() or time.monotonic() >= context.deadline:",
        "        if False:",
        (TOOL_PLUGINS + "test_a_cancelled_or_late_call_touches_nothing",),
    ),
    Mutant(
        "issue 50: a spec plugin is called before it is configured",
        V + "plugin.py",
        "        if not self._configured:\n",
        "        if False:\n",
        (
            TOOL_PLUGINS
            + "test_a_spec_plugin_declares_tools_and_answers_on_its_configured_instance",
        ),
    ),
    Mutant(
        "issue 50: a result value JSON cannot carry (a set, bytes, an object) is passed on",
        V + "plugin.py",
        "    if isinstance(value, (list, tuple)):\n"
        '        return [plain_json(v, f"{where}/{i}", depth + 1) for i, v in enumerate(value)]\n'
        "    raise ResultRefused",
        "    if True:\n        return value\n    raise ResultRefused",
        (TOOL_PLUGINS + "test_as_tool_result_refuses_anything_else_without_quoting_it",),
    ),
    Mutant(
        "issue 50: a plugin's answer for another tool is taken",
        V + "plugin.py",
        '        if named[0] not in ("", toolkit) or named[1] not in ("", name):',
        "        if False:",
        (TOOL_PLUGINS + "test_a_plugins_answer_for_another_tool_or_of_another_shape_is_refused",),
    ),
    Mutant(
        "tool call: a cancel read before its call's thread runs finds nothing",
        V + "core/connection.py",
        "self._calls.get(request.call_id) or self._expected.get(request.call_id)",
        "self._calls.get(request.call_id)",
        (TOOL_CALLS + "test_a_cancel_read_before_its_calls_thread_runs_still_cancels_it",),
    ),
    Mutant(
        "tool call: a job counted against an idle thread that is taking another one",
        V + "tools/calls.py",
        "            if self._waiting <= self._idle or self._started >= self._size:",
        "            if self._idle or self._started >= self._size:",
        (TOOL_CALLS + "test_a_call_never_waits_behind_a_running_one_while_threads_are_left",),
    ),
    # -- issue 50: the engine's records reach the store --
    Mutant(
        "tool call: the record names a toolkit the vault does not know (the agent's text)",
        V + "core/tool_calls.py",
        "        toolkit = msg.toolkit_name if known else None",
        "        toolkit = msg.toolkit_name",
        ("tests/test_tool_call_records.py",),
    ),
    Mutant(
        "tool call: the engine's records go nowhere",
        V + "core/vault.py",
        "store.record_call(tool_called_draft(**record.fields()))",
        "None",
        ("tests/test_tool_call_records.py",),
    ),
    # -- issue 54: console sign-in through an OpenID provider --
    Mutant(
        "oidc: an id_token's nonce is not compared with the sign-in's",
        OPENID,
        "or not hmac.compare_digest(sent.encode(), nonce.encode()):",
        ":",
        (OIDC_TESTS,),
        select="nonce or replayed",
    ),
    Mutant(
        "oidc: an id_token for another audience is believed",
        OPENID,
        "    if not isinstance(audiences, list) or client_id not in audiences:",
        "    if not isinstance(audiences, list):",
        (OIDC_TESTS,),
        select="audience or refuses_a_forged",
    ),
    Mutant(
        "oidc: an id_token's authorized party (azp) is not checked",
        OPENID,
        '    if ("azp" in claims or len(audiences) > 1) and claims.get("azp") != client_id:',
        "    if False:",
        (OIDC_TESTS,),
        select="not_for_this_sign_in",
    ),
    Mutant(
        "oidc: an expired id_token is believed",
        OPENID,
        "    if expires is None or now >= expires + leeway:",
        "    if expires is None:",
        (OIDC_TESTS,),
        select="expired",
    ),
    Mutant(
        "oidc: an id_token from another issuer is believed",
        OPENID,
        '    if claims.get("iss") != issuer:',
        "    if False:",
        (OIDC_TESTS,),
        select="issuer",
    ),
    Mutant(
        "oidc: a sign-in's flow may be taken twice (a callback replayed)",
        V + "transports/web/oidc_pages.py",
        "            flow = self._flows.pop(flow_id, None)",
        "            flow = self._flows.get(flow_id)",
        (OIDC_TESTS + "::test_the_console_signs_a_person_in_once_per_flow",),
    ),
    Mutant(
        "oidc: a callback's state is not compared with its flow's",
        V + "transports/web/oidc_pages.py",
        "        if not hmac.compare_digest(flow.state.encode(), state.encode()):",
        "        if False:",
        (OIDC_TESTS + "::test_the_console_signs_a_person_in_once_per_flow",),
    ),
    Mutant(
        "oidc: a removed mapping leaves the person's console session its role",
        V + "transports/web/console.py",
        "            return still_allowed(store, user.person)",
        "            return True",
        (OIDC_TESTS + "::test_the_console_signs_a_person_in_once_per_flow",),
    ),
    Mutant(
        "oidc: a person's console session lives as long as a token's",
        V + "transports/web/security.py",
        "        kept = min(self.lifetime, lifetime or self.lifetime)",
        "        kept = self.lifetime",
        (OIDC_TESTS + "::test_a_persons_console_session_ends_at_its_shorter_lifetime",),
    ),
    Mutant(
        "oidc: a person no mapping names gets a role anyway",
        V + "core/people.py",
        "    if role is None:\n",
        '    if role is None:\n        role = "auditor"\n    if False:\n',
        (OIDC_TESTS,),
        select="refuses_a_forged or named_after",
    ),
    # -- issue 50: a call's audit record (arguments_hmac, audit hash, batched records) --
    Mutant(
        "call audit: arguments_hmac is not keyed",
        V + "tools/call_audit.py",
        'hmac.digest(key.reveal(), canonical, "sha256")',
        'hmac.digest(b"0" * 32, canonical, "sha256")',
        (
            CALL_AUDIT + "test_the_hmac_is_of_the_canonical_arguments_under_the_key",
            CALL_AUDIT + "test_another_value_or_another_key_gives_another_hmac",
        ),
    ),
    Mutant(
        "call audit: arguments_hmac does not bind the arguments",
        V + "tools/call_audit.py",
        "        encoded = canonical_json(value)",
        '        encoded = b"{}"',
        (
            CALL_AUDIT + "test_the_hmac_is_of_the_canonical_arguments_under_the_key",
            CALL_AUDIT + "test_another_value_or_another_key_gives_another_hmac",
        ),
    ),
    Mutant(
        "call audit: the arguments' HMAC uses the chain's own key, not its subkey",
        V + "core/upkeep.py",
        "derive_key(audit_key, CALL_HMAC_LABEL)",
        "audit_key",
        (CALL_AUDIT + "test_the_vault_hashes_under_the_audit_keys_subkey",),
    ),
    Mutant(
        "call audit: a record is answered before its batch is committed",
        V + "store/call_records.py",
        "                batch.done.wait()\n"
        "                joined.link(batch.committed_by)"
        "  # the write that committed it, another's\n"
        "                if batch.error is not None:",
        "                if False:",
        (CALL_AUDIT + "test_a_failed_batch_fails_every_record_in_it_and_writes_none",),
    ),
    Mutant(
        "call audit: a batch left to the writer fails without its waiters hearing",
        V + "store/call_records.py",
        "                batch.error = _said(write.error)",
        "                pass",
        (CALL_AUDIT + "test_a_left_batch_that_fails_is_logged_and_its_waiters_hear_it",),
    ),
    # -- issue 50: who may call what, and how often --
    Mutant(
        "allowances: the allow-list permits any tool",
        V + "access/allowances.py",
        "        return toolkit in self.toolkits or (toolkit, tool) in self.tools",
        "        return True",
        (ALLOWANCES + "test_a_narrowed_agent_sees_only_what_it_may_call_until_widened",),
    ),
    Mutant(
        "allowances: a call is allowed whatever the principal was narrowed to",
        V + "core/vault.py",
        "        return allowance is None or allowance.permits(toolkit, tool)",
        "        return True",
        (
            ALLOWANCES + "test_a_narrowed_agent_sees_only_what_it_may_call_until_widened",
            ALLOWANCE_CALLS + "test_an_agent_narrowed_to_one_tool_sees_and_calls_only_that_one",
        ),
    ),
    Mutant(
        "allowances: the engine calls without asking who may call what",
        V + "core/tool_calls.py",
        "        if not self._call_allowed(principal.principal_id, name, tool_name):",
        "        if False:",
        (
            ALLOWANCE_CALLS + "test_an_agent_narrowed_to_one_tool_sees_and_calls_only_that_one",
            ALLOWANCE_CALLS + "test_a_narrowing_made_in_another_process_refuses_the_next_call_here",
        ),
    ),
    Mutant(
        "call limits: the engine runs a call without admission",
        V + "core/tool_calls.py",
        "            with self.call_limits.admit(principal.principal_id, (session_id, name)) as "
        "slot:",
        "            for slot in (lambda: None,):",
        (
            ALLOWANCE_CALLS
            + "test_an_instance_at_its_concurrency_answers_busy_and_others_are_served",
            ALLOWANCE_CALLS + "test_an_agent_past_its_rate_answers_busy_and_another_is_served",
        ),
    ),
    Mutant(
        "allowances: tool/list shows tools the principal may not call",
        V + "core/listing.py",
        "                and (allowance is None or allowance.permits(name, tool))\n",
        "",
        (ALLOWANCES + "test_a_narrowed_agent_sees_only_what_it_may_call_until_widened",),
    ),
    Mutant(
        "allowances: toolkit/list shows toolkits the principal may not use",
        V + "core/listing.py",
        "            if allowance is not None and not allowance.shows(definition.name):",
        "            if False:",
        (ALLOWANCES + "test_a_narrowed_agent_sees_only_what_it_may_call_until_widened",),
    ),
    Mutant(
        "allowances: a list answered on the event loop is not narrowed",
        V + "core/listing.py",
        "        allowance = allowance_in(chain, principal.principal_id)",
        "        allowance = None",
        (
            ALLOWANCES + "test_the_event_loop_path_filters_as_the_worker_path_does",
            ALLOWANCES + "test_another_process_follows_a_narrowing_made_elsewhere",
        ),
    ),
    Mutant(
        "allowances: widening is not followed from the chain",
        V + "store/ledger.py",
        '            self.allowances.pop(str(details.get("principal_id")), None)',
        "            pass",
        (ALLOWANCES + "test_a_narrowed_agent_sees_only_what_it_may_call_until_widened",),
    ),
    Mutant(
        "allowances: a name is not checked against the registry",
        V + "core/allowances.py",
        "        if declared and tool not in declared:",
        "        if False:",
        (ALLOWANCES + "test_names_are_checked_when_set_and_a_refusal_changes_nothing",),
    ),
    Mutant(
        "call limits: an instance runs any number of calls",
        V + "tools/limits.py",
        "            if limit is not None and running >= limit:",
        "            if False:",
        (
            LIMITS + "test_an_instance_runs_at_most_its_concurrency_and_a_slot_comes_back",
            LIMITS + "test_under_many_threads_the_limits_hold_exactly",
        ),
    ),
    Mutant(
        "call limits: the rate is never spent",
        V + "tools/limits.py",
        "        if bucket.tokens < 1:\n            return False",
        "        if False:\n            return False",
        (
            LIMITS + "test_a_principal_past_its_rate_is_refused_busy_and_others_are_not",
            LIMITS + "test_the_rate_holds_under_many_threads",
        ),
    ),
    Mutant(
        "call limits: a call's slot is never given back",
        V + "tools/limits.py",
        "                    self._running.pop(instance_key, None)",
        "                    pass",
        (LIMITS + "test_a_failing_call_gives_its_slot_back",),
    ),
    # -- issue 50: tool calls (the withheld check, the scope, arguments, cancellation) --
    Mutant(
        "tool call: a result carrying the scope's secret is answered",
        V + "tools/calls.py",
        "        if withholder().withholds_json(text, plain):",
        "        if False:",
        (TOOL_CALLS + "test_a_result_carrying_the_secret_is_withheld",),
    ),
    Mutant(
        "tool call: another session's instance is reached",
        V + "core/instances.py",
        """            entry = self._table.get(session_id, {}).get(name)
            if entry is None or entry.instance is None or entry.secrets is None:""",
        """            entry = next((e[name] for e in self._table.values() if name in e), None)
            if entry is None or entry.instance is None or entry.secrets is None:""",
        (TOOL_CALLS + "test_another_session_cannot_reach_the_instance",),
        also=(
            (
                V + "core/tool_calls.py",
                "        if name not in configured:",
                "        if False:",
            ),
        ),
    ),
    Mutant(
        "tool call: the live instance is not brought in line with the store first",
        V + "core/tool_calls.py",
        "        configured = self._configured_for_call(principal, session_id, mark)",
        "        configured = self.instances.live(session_id)",
        (TOOL_CALLS + "test_a_purge_made_by_another_process_is_seen_before_the_call",),
    ),
    Mutant(
        "tool call: arguments reach the tool unchecked",
        V + "core/tool_calls.py",
        "            checked.canonical = checked_arguments(schema, msg.arguments, limit)",
        "            pass",
        (TOOL_CALLS + "test_refusals_before_the_tool_runs",),
    ),
    Mutant(
        "tool call: a purge, reconfigure or expiry leaves the calls on the replaced entry",
        V + "core/instances.py",
        "                held.end_calls(replaced=newer)",
        "                pass",
        (
            TOOL_CALLS + "test_a_purge_during_a_slow_call_cancels_it",
            TOOL_CALLS + "test_a_reconfigure_during_a_slow_call_cancels_it",
            TOOL_CALLS + "test_an_expiry_during_a_slow_call_cancels_it",
        ),
    ),
    Mutant(
        "tool call: a dropped entry's calls go on",
        V + "core/instances.py",
        "                self._table[session_id].pop(name).end_calls()",
        "                self._table[session_id].pop(name)",
        (TOOL_CALLS + "test_a_principal_purge_cancels_the_calls_made_from_its_config",),
    ),
    Mutant(
        "tool call: tool/cancel does not cancel",
        V + "core/connection.py",
        """        if call is not None:
            call.cancel()""",
        """        if call is not None:
            pass""",
        (TOOL_CALLS + "test_tool_cancel_and_closing_the_connection_cancel",),
    ),
    Mutant(
        "tool call: closing the connection leaves its calls running",
        V + "core/connection.py",
        """            self.plugin = None
        self.cancel_calls()""",
        """            self.plugin = None""",
        (TOOL_CALLS + "test_tool_cancel_and_closing_the_connection_cancel",),
    ),
    Mutant(
        "tool call: a tool that never returns keeps the process from ending",
        V + "tools/calls.py",
        "threading.Thread(target=self._serve, name=name, daemon=True).start()",
        "threading.Thread(target=self._serve, name=name, daemon=False).start()",
        (TOOL_CALLS + "test_a_tool_that_never_returns_does_not_keep_the_process_from_ending",),
    ),
    Mutant(
        "tool call: an HTTP client that leaves leaves its call running",
        V + "transports/a2e/over_http.py",
        """            pass
        cancellation.cancel()""",
        """            pass""",
        ("tests/test_tool_calls_transports.py::test_an_http_client_that_leaves_cancels_its_call",),
    ),
    Mutant(
        "tool call: a WebSocket answers a call whose token was revoked meanwhile",
        V + "transports/a2e/over_websocket.py",
        """            if not await still_valid():
                await outbox.refuse()
                return
            await outbox.put(line)""",
        """            await outbox.put(line)""",
        ("tests/test_tool_calls_transports.py::test_a_call_outliving_its_token_is_not_answered",),
    ),
    # -- issue 51: the MCP client of imported servers --
    Mutant(
        "mcp client: a server's stderr is logged without the caller's redaction",
        V + "mcp_client/stderr.py",
        "text = logs.redact(self._redact(text))[:MAX_LINE_CHARS]",
        "text = logs.redact(text)[:MAX_LINE_CHARS]",
        ("tests/test_mcp_client.py::test_stderr_with_the_key_is_logged_redacted",),
    ),
    Mutant(
        "mcp client: a redirect to another origin is not refused by ours",
        V + "mcp_client/remote.py",
        "            if not same_origin(request.url, target):",
        "            if False:",
        ("tests/test_mcp_client_remote.py::test_a_redirect_to_another_origin_is_refused",),
    ),
    Mutant(
        "mcp client: a response body is not bounded",
        V + "mcp_client/remote.py",
        "            if total > self._limit:",
        "            if False:",
        ("tests/test_mcp_client_remote.py::test_a_response_over_the_bound_is_refused",),
    ),
    Mutant(
        "mcp client: a stop does not kill the process group",
        V + "mcp_client/stdio.py",
        "    _kill_group(process.pid)\n",
        "    process.kill()\n",
        ("tests/test_mcp_client.py::test_shutdown_kills_the_process_group_within_a_second",),
    ),
    Mutant(
        "mcp client: a description is not pinned",
        V + "mcp_client/descriptions.py",
        '            "description": self.description,\n',
        "",
        ("tests/test_mcp_client_tools.py::test_a_changed_description_is_named_by_the_pin",),
    ),
    # -- issue 54: metrics, traces and readiness --
    Mutant(
        "metrics: a label admits names past its cap",
        V + "telemetry/labels.py",
        "            if len(self._admitted) >= self.cap:",
        "            if False:",
        (
            "tests/test_metrics.py::test_a_soak_of_made_up_names_leaves_the_series_count_bounded",
            "tests/test_metrics.py::test_bounded_names_admit_up_to_the_cap",
        ),
    ),
    Mutant(
        "metrics: a label admits a value that is not name-shaped",
        V + "telemetry/labels.py",
        "        if self.shape is not None and not self.shape.fullmatch(name):",
        "        if False:",
        ("tests/test_metrics.py::test_an_unknown_outcome_and_a_name_that_is_not_one_are_other",),
    ),
    Mutant(
        "metrics: an outcome or transport outside its fixed set is kept",
        V + "telemetry/labels.py",
        "    return value if value in allowed else OTHER",
        "    return value",
        ("tests/test_metrics.py::test_an_unknown_outcome_and_a_name_that_is_not_one_are_other",),
    ),
    Mutant(
        "metrics: an agent's token may scrape /metrics",
        V + "transports/http_api.py",
        "health_routes(ReadinessProbe(vault), workers.run, as_auditor)",
        "health_routes(ReadinessProbe(vault), workers.run, "
        'gate.role("agent", "auditor", "operator"))',
        (
            "tests/test_metrics_http.py::test_a_scrape_after_each_kind_of_work_shows_each_counter_move",
        ),
    ),
    Mutant(
        "metrics: the separate listener may take a public address",
        V + "transports/http_health.py",
        "    if not loopback or not 0 <= port <= 65535:",
        "    if not 0 <= port <= 65535:",
        ("tests/test_metrics_http.py::test_metrics_turned_off_and_a_loopback_listener",),
    ),
    Mutant(
        "traces: any attribute key is kept",
        V + "telemetry/traces.py",
        "        if key not in ATTRIBUTES:\n            continue",
        "        pass",
        (
            "tests/test_traces_otel.py::test_context_passed_on_and_a_failure_marked_by_its_type_only",
        ),
    ),
    Mutant(
        "traces: an exception's message is recorded on its span",
        V + "telemetry/traces.py",
        "        record_exception=False,  # an exception's message may hold what we never log",
        "        record_exception=True,",
        (
            "tests/test_traces_otel.py::test_context_passed_on_and_a_failure_marked_by_its_type_only",
        ),
    ),
    Mutant(
        "readiness: a database that does not answer is ready",
        V + "core/health.py",
        "        if unreachable is not None:\n            reasons",
        "        if False:\n            reasons",
        (
            "tests/test_health.py::"
            "test_not_ready_while_postgresql_is_stopped_and_ready_once_it_is_back",
        ),
        select="postgres",
    ),
    Mutant(
        "readiness: a database behind its witness is ready",
        V + "store/health.py",
        "        failure = store.behind_witness() or store.state_failure() or "
        "store.witness_damage()",
        "        failure = None",
        ("tests/test_health.py::test_not_ready_while_the_database_is_behind_its_witness",),
    ),
    Mutant(
        "readiness: fail-closed devices that take nothing are ready",
        V + "core/health.py",
        "    if any(failure is None for _, failure in failures):",
        "    if True:",
        ("tests/test_health.py::test_not_ready_while_no_fail_closed_audit_device_takes_events",),
    ),
    # -- issue 51: the sandbox of imported servers (tests/test_sandbox.py) --
    *(
        Mutant(f"sandbox: {name}", V + "sandbox/" + path, find, replace, (SANDBOX + test,))
        for name, path, find, replace, test in (
            (
                "no PID namespace (the vault's /proc, another sandbox's environ)",
                "bubblewrap.py",
                '"--unshare-user", "--unshare-pid", "--unshare-ipc"',
                '"--unshare-user", "--unshare-ipc"',
                "test_a_hostile_process_reaches_nothing_of_the_vaults",
            ),
            (
                "the network stays on when the operator turned it off",
                "bubblewrap.py",
                'argv += ["--unshare-net"]',
                "argv += []",
                "test_a_hostile_process_reaches_nothing_of_the_vaults",
            ),
            (
                "the host's root is bound (the vault home in view)",
                "bubblewrap.py",
                'view = ["--ro-bind", "/usr", "/usr"]',
                'view = ["--ro-bind", "/", "/", "--ro-bind", "/usr", "/usr"]',
                "test_a_hostile_process_reaches_nothing_of_the_vaults",
            ),
            (
                "a root vault's sandbox keeps uid 0 (exempt from the process limit)",
                "bubblewrap.py",
                "    if os.geteuid() == 0:\n        setpriv",
                "    if False:\n        setpriv",
                "test_a_hostile_process_reaches_nothing_of_the_vaults",
            ),
            (
                "the root and /dev stay writable (tmpfs: memory without bound)",
                "bubblewrap.py",
                '"--remount-ro", "/dev", "--remount-ro", "/", "--chdir"',
                '"--chdir"',
                "test_a_hostile_process_reaches_nothing_of_the_vaults",
            ),
            (
                "user namespaces stay allowed inside",
                "bubblewrap.py",
                '"--unshare-cgroup-try", "--disable-userns"]',
                '"--unshare-cgroup-try"]',
                "test_a_hostile_process_reaches_nothing_of_the_vaults",
            ),
            (
                "does not die with its launcher",
                "bubblewrap.py",
                '["--die-with-parent", "--new-session",',
                '["--new-session",',
                "test_the_sandbox_dies_with_the_process_that_launched_it",
            ),
            (
                "shares the launcher's session (its terminal)",
                "bubblewrap.py",
                '["--die-with-parent", "--new-session",',
                '["--die-with-parent",',
                "test_a_sandbox_is_its_own_process_group_and_session",
            ),
            (
                "the vault's variables are inherited",
                "environment.py",
                "    if not names:\n        return []",
                "    if True:\n        return []",
                "test_a_hostile_process_reaches_nothing_of_the_vaults",
            ),
            (
                "a config sets HOME and TMPDIR",
                "environment.py",
                '{**_DEFAULTS, **env, "HOME": home, "TMPDIR": tmp}',
                '{**_DEFAULTS, "HOME": home, "TMPDIR": tmp, **env}',
                "test_a_launch_keeps_its_credentials_out_of_argv_and_repr",
            ),
            (
                "no memory limit",
                "launch.py",
                'f"--data={policy.memory_bytes}",',
                "",
                "test_a_hostile_process_reaches_nothing_of_the_vaults",
            ),
            (
                "no process limit (fork bomb)",
                "launch.py",
                'f"--nproc={policy.processes}",',
                "",
                "test_a_hostile_process_reaches_nothing_of_the_vaults",
            ),
            (
                "no descriptor limit",
                "launch.py",
                'f"--nofile={policy.open_files}",',
                "",
                "test_a_hostile_process_reaches_nothing_of_the_vaults",
            ),
            (
                "a bind that shows a hidden path is made",
                "launch.py",
                "    policy.check_hidden()",
                "    pass",
                "test_a_bind_that_would_show_a_hidden_path_is_refused",
            ),
            (
                "a private directory that is a link is bound",
                "launch.py",
                "        _require_directory(path)",
                "        pass",
                "test_a_private_directory_that_is_a_link_is_refused",
            ),
            (
                "no sandbox on the machine: launched anyway",
                "launch.py",
                "    if (reason := why_no_sandbox()) is not None:",
                "    if (reason := why_no_sandbox()) is None and False:",
                "test_without_a_sandbox_local_launches_are_refused_unless_turned_off",
            ),
        )
    ),
    # -- issue 52: the vault as an MCP server (bearer check, names, allow-list) --
    Mutant(
        "mcp: /mcp checks the token only when a session opens",
        V + "transports/mcp/over_http.py",
        """        except Refused as exc:
            await _refused(exc)(scope, receive, send)
            return""",
        """        except Refused as exc:
            key = request.headers.get("mcp-session-id")
            if key is None:
                await _refused(exc)(scope, receive, send)
                return
            principal = self.sessions._sessions[key].principal""",
        (MCP_HTTP + "test_no_token_or_a_revoked_one_is_refused_on_its_next_message",),
    ),
    Mutant(
        "mcp: a refused token's 401 names no scheme (WWW-Authenticate)",
        V + "transports/mcp/over_http.py",
        """    headers = {"WWW-Authenticate": 'Bearer realm="toolkit-vault"'}""",
        """    headers = {"X-Nothing": 'Bearer realm="toolkit-vault"'}""",
        (MCP_HTTP + "test_no_token_or_a_revoked_one_is_refused_on_its_next_message",),
    ),
    Mutant(
        "mcp: a call the client cancels runs on in the vault",
        V + "transports/mcp/server.py",
        """    except anyio.get_cancelled_exc_class():
        cancellation.cancel()""",
        """    except anyio.get_cancelled_exc_class():
        pass""",
        (MCP_HTTP + "test_a_call_the_client_cancels_is_cancelled_in_the_vault",),
    ),
    Mutant(
        "mcp: an MCP session an operator ended opens again on its next message",
        V + "transports/mcp/sessions.py",
        """            if key in self._ended:
                raise VaultError""",
        """            if False:
                raise VaultError""",
        (MCP_HTTP + "test_an_operator_sees_the_mcp_sessions_and_ends_one",),
        # the replica's own set is a belt: the chain's word (braces) refuses it as well
        also=((V + "transports/mcp/sessions.py", "        if ended:\n", "        if False:\n"),),
    ),
    Mutant(
        "mcp: a hashed name may land on a name already taken",
        V + "transports/mcp/names.py",
        """                if name not in taken:
                    self._place(pair, name, taken)""",
        """                if True:
                    self._place(pair, name, taken)""",
        (
            MCP_NAMES + "test_a_hashed_name_landing_on_one_as_written_takes_a_longer_hash",
            MCP_NAMES + "test_reserved_names_go_to_no_tool",
        ),
    ),
    Mutant(
        "mcp: a name as written is kept though another took it",
        V + "transports/mcp/names.py",
        """            if name == f"{pair[0]}{SEPARATOR}{pair[1]}" and name not in taken:""",
        """            if name == f"{pair[0]}{SEPARATOR}{pair[1]}":""",
        (MCP_NAMES + "test_reserved_names_go_to_no_tool",),
    ),
    Mutant(
        "mcp: names are not held to the clients' rule",
        V + "transports/mcp/names.py",
        """    return original if _FOLLOWS_RULE.fullmatch(original) else _hashed(original)""",
        """    return original""",
        (MCP_NAMES + "test_a_registry_name_is_mapped_to_the_rule_stably",),
    ),
    Mutant(
        "mcp: tools/list ignores the principal's allowance",
        V + "core/catalogue.py",
        """            if (allowance is None or allowance.permits(toolkit.definition.name, tool))
            and tool not in""",
        """            if True
            and tool not in""",
        (MCP_NAMES + "test_the_list_is_narrowed_by_the_principals_allowance",),
    ),
    # -- issue 51: imported local servers run by the vault (tests/test_imported_servers.py) --
    Mutant(
        "served: a secret of the config reaches the server's command line",
        V + "toolkits/server_launch.py",
        "started = launch(built.argv, built.env, policy, sandbox=settings.sandbox)",
        "started = launch([*built.argv, *built.env.values()], built.env, policy, sandbox=True)",
        (SERVED + "test_the_key_is_in_the_environment_only_and_the_server_is_confined",),
    ),
    Mutant(
        "served: the server runs outside the sandbox",
        V + "toolkits/server_launch.py",
        "started = launch(built.argv, built.env, policy, sandbox=settings.sandbox)",
        "started = launch(built.argv, built.env, policy, sandbox=False)",
        (SERVED + "test_the_key_is_in_the_environment_only_and_the_server_is_confined",),
    ),
    Mutant(
        "served: a dropped instance's server keeps running",
        V + "core/instances.py",
        "            call.cancel()\n        stop_instance(self.instance)",
        "            call.cancel()",
        (SERVED + "test_a_purge_stops_the_process_within_a_second",),
    ),
    # -- issue 53: backups without leftovers
    Mutant(
        "restore: a dry run creates the missing SQLite database it looks at",
        V + "store/snapshots.py",
        "        if _missing_sqlite_file(self._url):\n"
        "            return TargetState(None, {}, True)\n",
        "",
        ("tests/test_backup.py::test_a_dry_run_into_a_new_home_creates_nothing",),
    ),
    Mutant(
        "files: written under a temporary name (a kill after the last byte leaves it whole)",
        V + "files.py",
        "        fd = os.open(path.parent, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, mode)\n",
        "        fd = -1\n",
        ("tests/test_files.py::test_a_process_killed_after_its_last_byte_leaves_no_file",),
    ),
    Mutant(
        "actors: the person at the shell is whoever $USER says",
        V + "actors.py",
        "        return pwd.getpwuid(os.getuid()).pw_name\n",
        '        return os.environ.get("USER", "")\n',
        ("tests/test_actors.py",),
    ),
    # -- issue 51, helper H2: a local server's life (tests/test_server_lifecycle.py) --------
    Mutant(
        "server life: the last holder lets go and the process runs on",
        V + "toolkits/server_processes.py",
        '                return True\n        self._stop("stopped")\n        return True',
        "                return True\n        return True",
        (
            SERVED + "test_a_purge_stops_the_process_within_a_second",
            LIFE + "test_a_purge_during_a_call_stops_the_process_within_a_second",
        ),
    ),
    Mutant(
        "server life: a purge leaves an older version's process finishing its calls",
        V + "toolkits/server_processes.py",
        "            if at_once and last:  # its scope's toolkit is gone",
        "            if False:  # its scope's toolkit is gone",
        (LIFE + "test_a_purge_after_a_reconfigure_stops_the_draining_version_too",),
    ),
    Mutant(
        "server life: no cap on the servers running at once",
        V + "toolkits/server_limits.py",
        "if process not in self.slots and len(self.slots) >= self.limits.max_servers:",
        "if False:",
        (LIFE + "test_a_server_beyond_the_cap_is_refused_busy",),
    ),
    Mutant(
        "server life: an idle server runs on",
        V + "toolkits/server_processes.py",
        '        elif idle and state == "running":',
        "        elif False:",
        (LIFE + "test_an_idle_server_stops_and_starts_again_on_demand",),
    ),
    Mutant(
        "server life: a crashed server is not restarted",
        V + "toolkits/server_processes.py",
        "        elif due:\n",
        "        elif False:\n",
        (LIFE + "test_a_crashed_server_is_restarted_and_its_session_hears_of_it",),
    ),
    Mutant(
        "server life: a reconfigure cancels the old version's calls",
        V + "core/instances.py",
        "                held.end_calls(replaced=newer)",
        "                held.end_calls()",
        (LIFE + "test_a_reconfigure_lets_the_old_versions_call_finish",),
    ),
    Mutant(
        "server life: an unconfined launch is not audited",
        V + "toolkits/server_processes.py",
        "        if self.on_unconfined is not None:",
        "        if False:",
        (LIFE + "test_an_unconfined_launch_is_audited",),
    ),
    # -- issue 51: pinned tools of imported servers, imports by the hundred (helper H3b) --
    Mutant(
        "tool pins: a later list is not compared with the pin",
        V + "toolkits/tool_pins.py",
        "        changes = compare_pins(pinned, current)\n"
        "        return frozenset((*changes.added, *changes.changed))",
        "        return frozenset()",
        (PINS + "test_a_description_changed_between_starts_is_withheld_until_accepted",),
    ),
    Mutant(
        "tool pins: a withheld tool is listed and called all the same",
        V + "toolkits/served_tools.py",
        "        if not withheld:\n            return listed.tools",
        "        if True:\n            return listed.tools",
        (PINS + "test_a_description_changed_between_starts_is_withheld_until_accepted",),
        also=(
            (
                V + "core/tool_calls.py",
                "if served is not None and tool_name in withheld_tools(instance):",
                "if False:",
            ),
        ),
    ),
    Mutant(
        "tool pins: a later first pin (another process's) replaces the first",
        V + "store/ledger.py",
        'self.tool_pins.setdefault(key, digests_of(details.get("pins")))',
        'self.tool_pins[key] = digests_of(details.get("pins"))',
        (PINS + "test_the_chain_keeps_the_first_pin_and_moves_it_only_on_accept",),
    ),
    Mutant(
        "tool pins: accept takes a tool with no change waiting",
        V + "core/tool_pins.py",
        "    if unknown:\n        raise VaultError(",
        "    if False:\n        raise VaultError(",
        (PINS + "test_an_added_tool_is_withheld_and_a_removed_one_simply_goes",),
    ),
    Mutant(
        "import names: a name differing in case only is not a collision",
        V + "toolkits/import_names.py",
        "earlier = taken.get(name.casefold())",
        "earlier = taken.get(name)",
        (NAMES + "test_a_name_differing_in_case_only_is_refused_with_the_rename_hint",),
    ),
    Mutant(
        "import names: another source's toolkit is replaced without --replace",
        V + "toolkits/import_names.py",
        "    if not replace:\n        raise Skip(",
        "    if False:\n        raise Skip(",
        (NAMES + "test_another_source_under_an_imported_name_needs_replace",),
    ),
    Mutant(
        "import names: --dry-run stores what it reports",
        V + "toolkits/imports.py",
        "    if dry_run:\n        outcomes = _would_be(store, plans)",
        "    if False:\n        outcomes = _would_be(store, plans)",
        (NAMES + "test_dry_run_prints_the_report_and_stores_nothing",),
    ),
    # -- issue 51: registry packages launched as declared, a configure checked by its server
    # (tests/test_published_packages.py, tests/package/test_importers.py) --
    Mutant(
        "launches: a secret on the command line is imported without the operator's leave",
        V + "toolkits/launches.py",
        "    if not fields or not runs:\n        return None",
        "    if True:\n        return None",
        (PUBLISHED + "test_a_secret_on_the_command_line_is_refused_unless_allowed",),
    ),
    Mutant(
        "launches: a stored recipe with a secret on argv launches without the mark",
        V + "toolkits/launches.py",
        "if secret_argv_fields(definition.config_schema) and not launch.get(SECRET_ARGV_ALLOWED):",
        "if False:",
        (
            PUBLISHED
            + "test_a_stored_recipe_with_a_secret_on_argv_is_not_launched_without_the_mark",
        ),
    ),
    Mutant(
        "served: an imported server's configure is stored unchecked (no verify)",
        V + "toolkits/served.py",
        "    def verify(self, config: dict[str, Any]) -> None:",
        "    def _unchecked(self, config: dict[str, Any]) -> None:",
        (PUBLISHED + "test_a_server_that_exits_makes_the_configure_an_error_and_stores_nothing",),
    ),
    Mutant(
        "served: a server that exits passes its configure's check",
        V + "toolkits/served.py",
        'raise ServerCheckFailed(f"the server did not start or exited ({exc.reason})") from None',
        "return None",
        (PUBLISHED + "test_a_server_that_exits_makes_the_configure_an_error_and_stores_nothing",),
    ),
    Mutant(
        "served: a listed tool whose input schema the vault cannot run is offered",
        V + "toolkits/served_tools.py",
        "            schemas[tool.name] = compile_schema(tool.input_schema)",
        '            schemas[tool.name] = compile_schema({"type": "object"})',
        ("tests/test_tool_pins.py::test_a_tool_whose_schema_the_vault_cannot_run_is_left_out",),
    ),
    Mutant(
        "served: a listed tool whose output schema the vault cannot run is offered",
        V + "toolkits/served_tools.py",
        "                compile_schema(tool.output_schema)  # its results",
        "                pass  # its results",
        ("tests/test_tool_pins.py::test_a_tool_whose_schema_the_vault_cannot_run_is_left_out",),
    ),
    Mutant(
        "launch_recipe: a secret input's published default is kept in the recipe",
        "toolkit_package/launch_recipe.py",
        "    public = name not in secret and not isinstance(default, bool)",
        "    public = not isinstance(default, bool)",
        ("tests/package/test_importers.py::test_import_result_holds_no_value",),
    ),
    Mutant(
        "tool_calls: a remote server's 401 leaves the OAuth connection as it was",
        V + "core/tool_calls.py",
        'if getattr(claim.instance, "unauthorized", False):',
        "if False:",
        (REMOTE + "test_an_oauth_token_is_sent_and_a_401_marks_the_connection_for_reconnecting",),
    ),
    Mutant(
        "remote_served: a 401 during a call does not mark the instance",
        V + "toolkits/remote_served.py",
        "            self.unauthorized = True\n",
        "",
        (REMOTE + "test_a_token_refused_during_a_call_marks_the_instance",),
    ),
    Mutant(
        "remote_served: a configure with a token the server refuses is stored",
        V + "toolkits/remote_served.py",
        'raise ServerCheckFailed("the server answered 401 (unauthorized)") from None',
        "return None",
        (REMOTE + "test_a_wrong_token_is_a_configure_error_that_says_401_and_stores_nothing",),
    ),
    Mutant(
        "launch_recipe: a credential a bundle writes itself (argv and env) is kept",
        "toolkit_package/launch_recipe.py",
        '        return ""  # a credential the manifest writes itself: never kept',
        "        pass",
        (
            "tests/package/test_argv_credentials.py::"
            "test_a_credential_a_bundle_manifest_writes_itself_is_reported_never_echoed",
        ),
        also=(
            (
                "toolkit_package/launch_recipe.py",
                "        if written and (credential_word(key) is not None or "
                'TOKEN_SHAPE.match(value)):\n            return ""',
                "        if False:\n            pass",
            ),
        ),
    ),
    # -- H4 (issue 52 continued): tools/list kept per catalogue; its invalidation --
    Mutant(
        "mcp lists: a kept catalogue outlives an allowance change",
        V + "core/catalogue.py",
        "key = (tuple(map(id, toolkits)), allowance, unavailable, by_server)",
        "key = (tuple(map(id, toolkits)), None, unavailable, by_server)",
        (MCP_LISTS + "test_one_session_lists_what_changed_since_its_last_list",),
    ),
    Mutant(
        "mcp lists: a kept catalogue outlives a registry change",
        V + "core/catalogue.py",
        "key = (tuple(map(id, toolkits)), allowance, unavailable, by_server)",
        "key = ((), allowance, unavailable, by_server)",
        (MCP_LISTS + "test_one_session_lists_what_changed_since_its_last_list",),
    ),
    Mutant(
        "mcp lists: a kept list outlives its catalogue",
        V + "transports/mcp/listing.py",
        "key = (id(catalogue), showing)",
        "key = (0, showing)",
        (MCP_LISTS + "test_one_session_lists_what_changed_since_its_last_list",),
        also=(
            (
                V + "transports/mcp/listing.py",
                "if found is not None and found.catalogue is catalogue:",
                "if found is not None:",
            ),
        ),
    ),
    Mutant(
        "mcp lists: a kept list past the limit ignores the toolkits configured or enabled",
        V + "transports/mcp/listing.py",
        "key = (id(catalogue), showing)",
        "key = (id(catalogue), None)",
        (MCP_NAMES + "test_past_the_limit_configured_tools_and_discovery_only",),
    ),
    Mutant(
        "mcp session end: an operator's End is not audited (nor kept in the chain)",
        V + "transports/mcp/sessions.py",
        "        end_mcp_session(\n",
        "        (lambda *_, **__: None)(\n",
        (
            MCP_LISTS
            + "test_an_operator_ending_a_session_on_another_replica_is_audited_and_refused",
        ),
    ),
    Mutant(
        "mcp session end: the chain forgets an ended MCP session",
        V + "store/ledger.py",
        """            self.ended_mcp.add(details["mcp_session"])""",
        """            pass""",
        (
            MCP_LISTS
            + "test_an_operator_ending_a_session_on_another_replica_is_audited_and_refused",
        ),
    ),
    Mutant(
        "mcp session end: the replica holding the session does not read the chain",
        V + "transports/mcp/sessions.py",
        "        if ended:\n",
        "        if False:\n",
        (
            MCP_LISTS
            + "test_an_operator_ending_a_session_on_another_replica_is_audited_and_refused",
        ),
    ),
    Mutant(
        "mcp progress: a client's progressToken is not passed to the engine",
        V + "transports/mcp/server.py",
        "    cancellation = Cancellation(progress)",
        "    cancellation = Cancellation()",
        ("tests/test_mcp_endpoint_progress.py",),
    ),
    Mutant(
        "mcp progress: an imported server is not asked for its progress",
        V + "toolkits/served.py",
        "            progress=context.progress,",
        "            progress=None,",
        ("tests/test_mcp_endpoint_progress.py",),
        also=(
            (
                V + "toolkits/served.py",
                "context.deadline, context.cancelled, context.progress",
                "context.deadline, context.cancelled, None",
            ),
        ),
    ),
    Mutant(
        "mcp lists: a list answered on the event loop is not narrowed",
        V + "core/vault.py",
        "        allowance = allowance_in(chain, principal.principal_id)\n",
        "        allowance = None\n",
        (MCP_LISTS + "test_one_session_lists_what_changed_since_its_last_list",),
    ),
    # -- issue 50: call records on a chain per process (tests/test_call_chains.py) --
    Mutant(
        "call chain: a record's link is not checked",
        V + "audit/call_verify.py",
        "            if not record_links(sign, chain, previous, record):",
        "            if False:",
        (CALL_CHAINS + "test_an_edited_record_is_found",),
    ),
    Mutant(
        "call chain: a record's MAC does not cover its details",
        V + "store/call_links.py",
        'return canonical_json({**record, "chain": chain, "details": details})',
        'return canonical_json({**record, "chain": chain})',
        (CALL_CHAINS + "test_an_edited_record_is_found",),
    ),
    Mutant(
        "call chain: a missing record is not told (a gap passes for an edit)",
        V + "audit/call_verify.py",
        "            if seq > good + 1:",
        "            if False:",
        (CALL_CHAINS + "test_a_deleted_record_is_found",),
    ),
    Mutant(
        "call chain: the main chain's anchors are not held against the chain's end",
        V + "audit/call_verify.py",
        "    if anchored > last:",
        "    if False:",
        (
            CALL_CHAINS + "test_a_tail_cut_with_an_old_head_row_is_found_by_the_anchor",
            CALL_CHAINS + "test_a_chain_deleted_whole_is_found_by_its_anchor",
        ),
    ),
    Mutant(
        "call chain: the head row is not held against the chain's end",
        V + "audit/call_verify.py",
        "    if seq > last:\n",
        "    if False:\n",
        (CALL_CHAINS + "test_a_tail_cut_off_is_found_by_the_head_row",),
    ),
    Mutant(
        "call chain: a clean shutdown leaves the tail unanchored",
        V + "store/storage.py",
        "        self.call_chain.close()\n",
        "",
        (CALL_CHAINS + "test_records_verify_and_the_tail_after_the_anchor_is_reported",),
    ),
    Mutant(
        "call chain: a batch is a write of the main chain's (PostgreSQL: its lock, its notice)",
        V + "store/call_chains.py",
        "        if not self._postgresql:\n            return self._host.transact(work)",
        "        return self._host.transact(work)",
        (CALL_CHAINS + "test_a_call_record_moves_no_commit_mark_on_postgresql",),
        select="postgres",
    ),
    # -- issue 53: checkpoints of the chain's state (tests/test_checkpoints.py) --
    Mutant(
        "checkpoints: a process exits without its checkpoint being written",
        V + "store/checkpoints.py",
        "                atexit.register(self.finish)",
        "                pass",
        (
            "tests/test_checkpoints.py::"
            "test_a_process_that_exits_as_its_checkpoint_is_written_names_it",
        ),
    ),
    Mutant(
        "checkpoints: pruned by age alone, the named one with them",
        V + "store/checkpoints.py",
        "floor = kept[-1] if named is None else min(kept[-1], named[0])",
        "floor = kept[-1]",
        (
            "tests/test_checkpoints.py::"
            "test_a_process_that_ends_before_naming_its_checkpoint_leaves_the_named_one",
        ),
    ),
    Mutant(
        "checkpoints: a checkpoint whose MAC fails is believed",
        V + "store/checkpoints.py",
        "if not hmac.compare_digest(expected, bytes(row.checkpoint_mac)):",
        "if False:",
        ("tests/test_checkpoints.py::test_a_checkpoint_that_does_not_verify_is_not_believed",),
    ),
    Mutant(
        "checkpoints: a checkpoint is not bound to the chain's link at its seq",
        V + "store/checkpoints.py",
        "if not _link_is(conn, seq, mac):",
        "if False:",
        (
            "tests/test_checkpoints.py::test_a_checkpoint_that_disagrees_with_the_chain_is_not_believed",
        ),
    ),
    Mutant(
        "checkpoints: a checkpoint not believed leaves the process believing nothing",
        V + "store/checkpoints.py",
        "            self.refused = reason\n",
        "            ledger.failure = self.refused = reason\n",
        ("tests/test_checkpoints.py::test_a_checkpoint_that_does_not_verify_is_not_believed",),
    ),
    Mutant(
        "checkpoints: an event deleted below a checkpoint goes unnoticed at start",
        V + "store/checkpoints.py",
        "if count_to(conn, seq) != seq:",
        "if False:",
        ("tests/test_checkpoints.py::test_a_checkpoint_that_does_not_verify_is_not_believed",),
    ),
    Mutant(
        "checkpoints: a first walk does not start from the named checkpoint",
        FOLLOWING,
        "self.checkpoints.start(conn, ledger, self._sign, witness)",
        "pass",
        (
            "tests/test_checkpoints.py::test_a_process_starts_from_the_checkpoint_and_follows_what_came_after",
        ),
    ),
    # -- issue 54 (H5): /v1 refusals as RFC 9457 problem details (tests/test_problem_details.py) --
    Mutant(
        "problems: an unreadable since repeats the submitted text",
        V + "transports/http_admin.py",
        "except VaultError:  # its message repeats the text",
        "except VaultError as exc:  # its message repeats the text",
        ("tests/test_problem_details.py::test_v1_refusals_are_problem_details_that_echo_nothing",),
        also=(
            (
                V + "transports/http_admin.py",
                'INVALID_MESSAGE", SINCE_UNREADABLE,',
                'INVALID_MESSAGE", exc.message,',
            ),
        ),
    ),
    Mutant(
        "problems: a /v1 refusal is sent as plain JSON",
        V + "transports/problems.py",
        "headers=headers, media_type=MEDIA_TYPE)",
        "headers=headers)",
        ("tests/test_problem_details.py::test_v1_refusals_are_problem_details_that_echo_nothing",),
    ),
    # -- issue 54 (H5): console tables that fit (tests/web/test_console_tables_browser.py) --
    Mutant(
        "tables: the toolkits table shows the whole schema digest",
        V + "transports/web/templates/toolkits.html",
        "<code>{{ t.schema.digest[:19] }}…</code>",
        "<code>{{ t.schema.digest }}</code>",
        (TABLES,),
    ),
    Mutant(
        "tables: the tokens table is a table at a phone's width, not cards",
        V + "transports/web/templates/tokens.html",
        '<table class="stack">',
        "<table>",
        (TABLES,),
    ),
    # -- issue 54 (H5): a traced tool call to an imported server (tests/test_traces_tool_call.py) --
    Mutant(
        "traces: the upstream call has no span of its own",
        V + "mcp_client/host.py",
        'with traces.span("mcp.upstream", toolkit=self.session.server.label, tool=name):',
        "if True:",
        (TRACED_CALL,),
    ),
    Mutant(
        "traces: the engine's thread runs the tool outside the call's trace",
        V + "core/tool_calls.py",
        "run = traces.carried(partial(instance.call_tool, tool_name, msg.arguments))",
        "run = partial(instance.call_tool, tool_name, msg.arguments)",
        (TRACED_CALL,),
    ),
    # -- issue 50 (H1a): a call run whole on a tool thread while the event loop waits --
    Mutant(
        "tool call: a call is answered before its record is committed (left to the writer)",
        V + "core/vault.py",
        "store.record_call(tool_called_draft(**record.fields()))",
        "store.record_call(tool_called_draft(**record.fields()), wait=False)",
        (TRANSPORT_CALLS + "test_stdio_answers_a_call_only_once_its_record_is_committed",),
    ),
    Mutant(
        "tool call: a call the event loop's waiter ended past its deadline goes unrecorded",
        V + "core/connection.py",
        "self.vault.end_call(self.principal, session_id, request, refusal, started)",
        "pass",
        (
            TRANSPORT_CALLS
            + "test_a_websocket_call_past_its_deadline_answers_timeout_once_recorded",
        ),
    ),
    Mutant(
        "tool call: the event loop's waiter does not answer when the deadline passes",
        V + "transports/a2e/calling.py",
        "    timer = loop.call_later(seconds, waiter.wake)",
        "    timer = loop.call_later(3600, waiter.wake)",
        (
            TRANSPORT_CALLS
            + "test_a_websocket_call_past_its_deadline_answers_timeout_once_recorded",
        ),
    ),
    Mutant(
        "tool call: the call's thread records a call its waiter already answered",
        V + "core/tool_calls.py",
        "            if cancellation.end(CALL_ENDS):\n                named = self._record_call(",
        "            if True:\n                named = self._record_call(",
        (
            TRANSPORT_CALLS
            + "test_a_websocket_call_past_its_deadline_answers_timeout_once_recorded",
        ),
    ),
    Mutant(
        "call limits: a slot given back early is given back again when the tool ends",
        V + "tools/limits.py",
        "                if given:\n                    return\n",
        "",
        (LIMITS + "test_a_slot_given_back_early_is_given_back_once",),
    ),
    Mutant(
        "served: a server's changed tool is not withheld (local and remote, `PinnedTools`)",
        V + "toolkits/served_tools.py",
        "        return frozenset() if self._pins is None else self._pins.withheld(listed.digests)",
        "        return frozenset()",
        (
            SSE_VAULT + "test_a_description_changed_after_the_pin_or_an_acceptance_is_withheld",
            PINS + "test_a_description_changed_between_starts_is_withheld_until_accepted",
        ),
    ),
    Mutant(
        "imports: a remote server's instance is made without its pin",
        V + "toolkits/imports.py",
        "partial(RemoteServedToolkit, definition, tools, connect, pins)",
        "partial(RemoteServedToolkit, definition, tools, connect)",
        (SSE_VAULT + "test_a_description_changed_after_the_pin_or_an_acceptance_is_withheld",),
    ),
    Mutant(
        "mcp client: a message POST refused over SSE is not answered (the call waits)",
        V + "mcp_client/remote.py",
        '        if self._refuse is not None and request.method == "POST" and response.status_code',
        '        if False and request.method == "POST" and response.status_code',
        (SSE_CLIENT + "test_a_401_during_an_sse_call_is_unauthorized_at_once",),
    ),
    Mutant(
        "mcp client: an SSE event is not bounded by ours",
        V + "mcp_client/remote.py",
        "            if pending > self._limit:",
        "            if False:",
        (SSE_CLIENT + "test_an_sse_event_over_the_bound_is_refused_and_ends_the_session",),
    ),
    Mutant(
        "mcp client: an SSE session whose stream ended stays running",
        V + "mcp_client/remote.py",
        "            raise _StreamEnded  # the server ended it",
        "            return  # the server ended it",
        (SSE_CLIENT + "test_an_sse_event_over_the_bound_is_refused_and_ends_the_session",),
    ),
    Mutant(
        "mcp client: an SSE redirect to another origin is not refused by ours",
        V + "mcp_client/remote.py",
        "            if not same_origin(request.url, target):",
        "            if False:",
        (SSE_CLIENT + "test_an_sse_redirect_to_another_origin_is_refused",),
    ),
    Mutant(
        "remote_served: a 401 during an SSE call does not mark the instance",
        V + "toolkits/remote_served.py",
        "        except UpstreamUnauthorized:\n"
        "            self.unauthorized = True\n            raise",
        "        except UpstreamUnauthorized:\n            raise",
        (SSE_VAULT + "test_a_token_refused_during_a_call_marks_the_instance",),
    ),
    Mutant(
        "remote_served: a session that ended is not opened again before a call",
        V + "toolkits/remote_served.py",
        '        if handle is None or handle.state == "running" or self.unauthorized:\n',
        "        if True:\n",
        (
            SSE_VAULT + "test_a_session_whose_server_restarted_is_connected_again_at_the_next_call",
            SSE_VAULT + "test_a_description_changed_after_the_pin_or_an_acceptance_is_withheld",
        ),
    ),
    Mutant(
        "mcp client: an SSE endpoint on another origin is left to the SDK (which hangs)",
        V + "mcp_client/remote.py",
        "                        if not same_origin(self._origin, self._origin.join(endpoint)):",
        "                        if False:",
        (SSE_CLIENT + "test_an_sse_endpoint_on_another_origin_gets_no_message",),
    ),
    Mutant(
        "remote_served: a 401 when a session is opened again does not mark the instance",
        V + "toolkits/remote_served.py",
        "                self.unauthorized = True  # the call says 401;",
        "                pass  # the call says 401;",
        (SSE_VAULT + "test_a_401_when_connecting_again_marks_the_instance",),
    ),
    # -- issue 51 (stdio-perf): a configure's checked server kept for its launch; calls --
    Mutant(
        "checked servers: a kept server is taken by another launch",
        V + "toolkits/checked_servers.py",
        "            return self._waiting.pop(digest, None)",
        "            return self._waiting.pop(next(iter(self._waiting), digest), None)",
        (LIFE + "test_a_checked_server_is_taken_only_by_its_own_launch_and_stopped_when_not",),
    ),
    Mutant(
        "checked servers: a kept server no instance took runs on",
        V + "toolkits/checked_servers.py",
        "        self._stop(started)\n",
        "",
        (LIFE + "test_a_checked_server_is_taken_only_by_its_own_launch_and_stopped_when_not",),
    ),
    Mutant(
        "checked servers: an unconfined checked server taken over is not audited",
        V + "toolkits/served.py",
        "        elif confined is not None:\n            self._process.launched(confined=confined)",
        "        elif confined is not None:\n            pass",
        (LIFE + "test_an_unconfined_launch_is_audited",),
    ),
    Mutant(
        "tool pins: the remembered comparison outlives an acceptance",
        V + "toolkits/tool_pins.py",
        "if last is not None and last[1] == current and last[0] == pinned:",
        "if last is not None and last[1] == current:",
        (PINS + "test_a_description_changed_between_starts_is_withheld_until_accepted",),
    ),
    Mutant(
        "tool pins: the remembered comparison is taken for another list",
        V + "toolkits/tool_pins.py",
        "if last is not None and last[1] == current and last[0] == pinned:",
        "if last is not None and last[0] == pinned:",
        (PINS + "test_a_description_changed_between_starts_is_withheld_until_accepted",),
    ),
    Mutant(
        "mcp client: a call's cancel flag is never looked at",
        V + "mcp_client/session.py",
        "                if flag.is_set():\n                    scope.cancel()",
        "                if False:\n                    scope.cancel()",
        ("tests/test_mcp_client.py::test_cancellation_reaches_the_server",),
    ),
    Mutant(
        "key move: the home is pinned to a target that does not hold every vault key",
        V + "keys/move.py",
        "    if left:  # a vault key added meanwhile",
        "    if False:  # a vault key added meanwhile",
        (
            "tests/test_master_key_move.py::"
            "test_a_vault_key_added_under_the_old_master_key_during_the_move_holds_back_the_pin",
        ),
    ),
    Mutant(
        "key move: the home pins the target before the store holds it",
        V + "keys/move.py",
        "    if moves:\n        intent()\n",
        "    if moves:\n        pin()\n        intent()\n",
        (
            "tests/test_master_key_move.py::"
            "test_killed_before_the_commit_or_before_the_pin_the_vault_opens_and_a_rerun_finishes",
        ),
    ),
    Mutant(
        "key move: the store changes before the home records the move",
        V + "keys/move.py",
        "    if moves:\n        intent()\n",
        "    if moves:\n",
        (
            "tests/test_master_key_move.py::"
            "test_killed_before_the_commit_or_before_the_pin_the_vault_opens_and_a_rerun_finishes",
        ),
    ),
    Mutant(
        "key move: a refused target leaves a recorded move behind",
        V + "keys/move.py",
        "    created = target.status().current is None",
        "    intent()\n    created = target.status().current is None",
        (
            "tests/test_master_key_move.py::"
            "test_a_missing_or_unreachable_target_is_refused_and_nothing_changes",
        ),
    ),
    Mutant(
        "key move: a target that gives back another key is not refused",
        V + "keys/move.py",
        "    if key_check_value(target.unwrap(wrapped, context)) != key_check_value(key):",
        "    if False:",
        (
            "tests/test_master_key_move.py::"
            "test_a_target_that_does_not_give_the_key_back_is_refused",
        ),
    ),
    Mutant(
        "key move: a process does not follow the home to the moved master key",
        V + "keys/hierarchy.py",
        "            if self.follow is None:\n                raise",
        "            if True:\n                raise",
        (
            "tests/test_master_key_move.py::"
            "test_a_running_server_keeps_answering_and_follows_the_move",
        ),
    ),
    Mutant(
        "key move: a new target replaces a recorded move whose target holds the vault keys",
        V + "keys/move.py",
        "        if holder is not sources[0]:",
        "        if False:",
        (
            "tests/test_master_key_move.py::"
            "test_killed_before_the_commit_or_before_the_pin_the_vault_opens_and_a_rerun_finishes",
        ),
    ),
    # -- issue 50: call records gather the calls under way (tests/test_call_gathering.py) --
    Mutant(
        "call records: a batch's first record waits for no call under way",
        V + "store/call_records.py",
        "        if self._coming <= 0:\n            return\n        deadline",
        "        if True:\n            return\n        deadline",
        (GATHERING + "test_the_calls_under_way_share_the_first_ones_commit",),
    ),
    Mutant(
        "call records: a batch waits for the calls under way without a bound",
        V + "store/call_records.py",
        "                if left <= 0 or not self._joined.wait(left):",
        "                if not self._joined.wait():",
        (GATHERING + "test_the_wait_is_bounded",),
    ),
    Mutant(
        "call records: a call that ended without its record is still waited for",
        V + "store/call_records.py",
        "            _EXPECTED.reset(token)\n            call.end()",
        "            _EXPECTED.reset(token)",
        (GATHERING + "test_a_call_that_ends_without_a_record_is_no_longer_waited_for",),
    ),
    Mutant(
        "call records: a call in its tool is waited for",
        V + "store/call_records.py",
        "        call.end()\n        try:\n            yield",
        "        try:\n            yield",
        (GATHERING + "test_a_call_in_its_tool_is_not_waited_for",),
    ),
    Mutant(
        "call records: a batch's first record is answered before its commit",
        V + "store/call_records.py",
        "            self._now(lambda conn: self._write(conn, batch))",
        "            self._leave_write(lambda conn: self._write(conn, batch))",
        (CALL_AUDIT + "test_a_failed_batch_fails_every_record_in_it_and_writes_none",),
    ),
    # -- issue 50: a call whose record joined another's batch, answered by its loop --
    Mutant(
        "call records: a call whose record joined another's batch is answered before it commits",
        V + "transports/a2e/calling.py",
        "            not_written = await to_come.committed()",
        "            not_written = None",
        (ANSWER_AFTER + "test_calls_side_by_side_are_answered_only_once_their_batch_commits",),
    ),
    Mutant(
        "call records: a record that joined another's batch is left to no one",
        V + "store/call_records.py",
        "            to_come.batches.append(batch)",
        "            pass",
        (ANSWER_AFTER + "test_calls_side_by_side_are_answered_only_once_their_batch_commits",),
    ),
    Mutant(
        "call records: a loop waiting for a failed batch hears a commit",
        V + "store/call_records.py",
        "            if batch.error is not None:\n"
        "                return batch.error\n        return None",
        "        return None",
        (ANSWER_AFTER + "test_a_record_left_in_a_failed_batch_answers_its_loop_with_the_failure",),
    ),
    Mutant(
        "call records: an /mcp call whose record joined another's batch is answered before it "
        "commits",
        V + "transports/mcp/server.py",
        "        not_written = await to_come.committed()",
        "        not_written = None",
        (ANSWER_AFTER + "test_mcp_calls_side_by_side_are_answered_only_once_their_batch_commits",),
    ),
    # -- issue 53: verification proportional to change (the last-verified mark) --
    Mutant(
        "verify mark: its MAC is not checked",
        V + "store/verified.py",
        "    if not hmac.compare_digest(mark_link(sign, kind, header), claimed):",
        "    if False:",
        (INCREMENTAL + "test_a_damaged_mark_is_not_believed",),
    ),
    Mutant(
        "verify mark: not bound to the chain's link at its seq",
        V + "audit/verify.py",
        "    if not hmac.compare_digest(stored, mark.link):",
        "    if False:",
        (INCREMENTAL + "test_a_mark_the_chain_disagrees_with_is_not_believed",),
    ),
    Mutant(
        "verify mark: a mark the chain disagrees with is still believed (no fallback)",
        V + "audit/verify.py",
        "            mark, refused = None, why",
        "            refused = why",
        (INCREMENTAL + "test_a_mark_over_events_deleted_below_it_is_not_believed",),
    ),
    Mutant(
        "count below a seq: an event moved below seq 1 still counts (first walk, checkpoint)",
        V + "store/checkpoints.py",
        "select(_every_event(conn).scalar_subquery() - after - before)",
        "select(_every_event(conn).scalar_subquery() - after)",
        ("tests/test_checkpoints.py::test_the_count_below_a_seq_is_the_events_from_1_to_it",),
    ),
    Mutant(
        "count below a seq: an event moved below seq 1 still counts (incremental audit verify)",
        V + "store/checkpoints.py",
        "select(every - after - before)",
        "select(every - after)",
        (INCREMENTAL + "test_a_deleted_event_made_up_for_below_the_first_seq_is_still_missing",),
    ),
    Mutant(
        "incremental check: new versions held to the store's follow, not its walk's state",
        V + "core/auditing.py",
        "check_versions(self.store, ring_for, audit_key, start, chain=chain)",
        "check_versions(self.store, ring_for, audit_key, start)",
        (
            INCREMENTAL
            + "test_an_incremental_check_holds_new_versions_to_the_state_its_walk_verified",
        ),
    ),
    Mutant(
        "CLI start-up: audit verify opens the whole vault (registry, pydantic) again",
        V + "cli/operators.py",
        "    report = open_for_audit(load_settings()).verify_audit(full=full)",
        "    report = open_for_operators(load_settings()).verify_audit(full=full)",
        (
            "tests/test_cli_startup.py::"
            "test_audit_verify_and_check_import_no_vault_registry_or_models",
        ),
    ),
    Mutant(
        "SQLite text that is not UTF-8 stops the whole run, not that row's check",
        V + "store/database.py",
        '_LENIENT_TEXT = operator.methodcaller("decode", "utf-8", "replace")',
        "_LENIENT_TEXT = str",
        (INCREMENTAL + "test_a_row_whose_text_is_not_utf8_fails_its_own_check_only",),
    ),
    Mutant(
        "check mark: versions deleted below it go unnoticed",
        V + "core/checking.py",
        "    if versions_to(store, last_id) != count:",
        "    if False:",
        (INCREMENTAL + "test_a_check_mark_over_a_deleted_version_is_not_believed",),
    ),
    Mutant(
        "CLI start-up: mcp_client imports the MCP SDK at its top again (toolkits list pays it)",
        V + "mcp_client/__init__.py",
        "from .pinning import PinChanges, compare_pins, pin_digest, pin_tools, tool_digest\n",
        "from .pinning import PinChanges, compare_pins, pin_digest, pin_tools, tool_digest\n"
        "from .host import UpstreamHandle, UpstreamHost\n",
        (
            "tests/test_cli_startup.py::test_toolkits_list_imports_no_mcp_sdk_and_no_vault",
            # a listing reaches `mcp_client` only once a definition is stored (issue 53)
            "tests/test_cli_startup.py::"
            "test_toolkits_list_loads_the_imported_side_when_a_definition_is_stored",
        ),
    ),
    Mutant(
        "chain's word: an intake submission believes the status column (a pending row put back)",
        VERSIONS,
        "    if word.was_purged(scope, toolkit, waiting):",
        "    if False:",
        (CHAIN_WORD + "test_a_pending_intake_row_put_back_during_the_check_stores_nothing",),
    ),
    Mutant(
        "chain's word: a refresh believes the pointer row (one put back after a purge)",
        VERSIONS,
        "word.last_version(scope, toolkit) == after and word.pointer(scope, toolkit) == after",
        "True",
        (CHAIN_WORD + "test_a_pointer_row_put_back_during_a_refresh_stores_nothing",),
    ),
    Mutant(
        "chain's word: an intake link opens on a pending row put back after a purge",
        VERSIONS,
        "        if state.was_purged(scope, toolkit, version):",
        "        if False:",
        (CHAIN_WORD + "test_a_pending_intake_row_put_back_after_a_purge_does_not_reopen_the_link",),
    ),
    Mutant(
        "chain's word: the write takes the ledger's word without the events after it",
        V + "store/chain_word.py",
        "        word.apply(event)\n",
        "",
        (CHAIN_WORD + "test_a_pending_intake_row_put_back_during_the_check_stores_nothing",),
    ),
    Mutant(
        "chain's word: the events the write reads are not verified",
        V + "store/chain_word.py",
        'if event["seq"] != seq + 1 or not links(sign, mac, event):',
        'if event["seq"] != seq + 1:',
        (CHAIN_WORD + "test_an_edited_purge_event_read_by_the_write_stores_nothing",),
    ),
    Mutant(
        "chain's word: the events read need not reach the end the write extends",
        V + "store/chain_word.py",
        "    if seq != end[0] or not hmac.compare_digest(mac, end[1]):",
        "    if False:",
        (CHAIN_WORD + "test_the_chain_word_reaches_the_end_the_write_extends",),
    ),
    Mutant(
        "refresh leases: a lease row claiming an hour is believed",
        V + "store/leases.py",
        "held = now < row.expires_at <= now + self.longest_lease + LEEWAY",
        "held = now < row.expires_at",
        (CHAIN_WORD + "test_a_forged_lease_holds_a_refresh_no_longer_than_the_vault_would",),
    ),
    Mutant(
        "refresh leases: a backoff of a day is believed",
        V + "store/leases.py",
        "if now < row.retry_at <= now + self.longest_backoff + LEEWAY:",
        "if now < row.retry_at:",
        (CHAIN_WORD + "test_a_forged_lease_holds_a_refresh_no_longer_than_the_vault_would",),
    ),
    Mutant(
        "CLI start-up: the oauth package imports its HTTP client at its top again",
        V + "oauth/__init__.py",
        "from toolkit_vault.oauth.tokens import TOKEN_SET_KEY, TokenSet, without_token_set\n",
        "from toolkit_vault.oauth.tokens import TOKEN_SET_KEY, TokenSet, without_token_set\n"
        "from toolkit_vault.oauth.client import OAuthClient\n",
        (
            "tests/test_cli_startup.py::test_toolkits_list_imports_no_mcp_sdk_and_no_vault",
            # a listing reaches `oauth` only once a definition is stored (issue 53)
            "tests/test_cli_startup.py::"
            "test_toolkits_list_loads_the_imported_side_when_a_definition_is_stored",
        ),
    ),
    Mutant(
        "server states: a drained server that stopped is still shown (its call ended)",
        V + "toolkits/server_processes.py",
        "            if done:  # drained: no longer live (`toolkits show` forgets it)\n"
        "                self._closed, self._draining = True, False",
        "            if done:\n                self._closed = True",
        ("tests/test_server_states.py",),
    ),
    Mutant(
        "server states: a draining server a purge stopped is still shown",
        V + "toolkits/server_processes.py",
        '            self._closed, self._draining = True, False\n        self._stop("stopped")',
        '            self._closed = True\n        self._stop("stopped")',
        ("tests/test_server_states.py",),
    ),
    Mutant(
        "traces: a call record another call's batch carries leaves no span in its trace",
        V + "store/call_records.py",
        'with traces.span("storage.write", storage__batch="joined") as joined:',
        'with traces.span("untraced") as joined:',
        (
            "tests/test_call_gathering.py::test_a_record_another_calls_batch_carries_is_traced_in_its_own_call",
        ),
    ),
    Mutant(
        "traces: a joined record's span is not linked to the write that committed it",
        V + "store/call_records.py",
        "        batch.committed_by = traces.current()\n",
        "",
        (
            "tests/test_call_gathering.py::test_a_record_another_calls_batch_carries_is_traced_in_its_own_call",
        ),
    ),
    # -- issue 51 (stdiospeed): an imported server's call waited for on the caller's thread --
    Mutant(
        "tool call: an imported server's result is answered unsearched (the caller waits)",
        V + "tools/calls.py",
        "return self.checked(_answer(lambda _: future.result(0), context), withholder)",
        "return _answer(lambda _: future.result(0), context)",
        ("tests/test_imported_servers.py::test_a_result_carrying_the_key_is_withheld",),
    ),
    Mutant(
        "live registry: a call's follow at once (the watching connection) loads nothing",
        V + "core/registry_follow.py",
        "            self.follow_chain(chain)\n        return self.registry.get(name)",
        "            pass\n        return self.registry.get(name)",
        LIVE_REGISTRY,
    ),
    Mutant(
        "CLI start-up: the store's models import the ORM again",
        V + "store/models.py",
        "from sqlalchemy.sql.elements import KeyedColumnElement\n",
        "from sqlalchemy.sql.elements import KeyedColumnElement\nimport sqlalchemy.orm  # noqa\n",
        (
            "tests/test_cli_startup.py::test_a_listing_imports_nothing_of_the_serving_side",
            "tests/test_cli_startup.py::test_toolkits_list_imports_no_mcp_sdk_and_no_vault",
        ),
    ),
    Mutant(
        "CLI start-up: compiled schemas import jsonschema at their top again",
        V + "schema/compiled.py",
        "from toolkit_vault.schema.split import INVALID, SecretSplit\n",
        "from toolkit_vault.schema.split import INVALID, SecretSplit\n"
        "from toolkit_vault.schema import refusals  # noqa\n",
        (
            "tests/test_cli_startup.py::test_a_listing_imports_nothing_of_the_serving_side",
            "tests/test_cli_startup.py::test_toolkits_list_imports_no_mcp_sdk_and_no_vault",
        ),
    ),
    Mutant(
        "CLI start-up: the built-in toolkit's schemas compile at registration again",
        V + "toolkits/registry.py",
        "compile_now = source != BUILT_IN",
        "compile_now = True",
        ("tests/test_cli_startup.py::test_the_registry_compiles_no_built_in_schema",),
    ),
    Mutant(
        "CLI start-up: every entry-point group is a scan of its own again",
        V + "installed.py",
        "found = _groups[name] = tuple(_select(group=name))",
        "found = _groups[name] = tuple(entry_points(group=name))",
        ("tests/test_cli_startup.py::test_toolkits_list_reads_the_installed_entry_points_once",),
    ),
    Mutant(
        "metrics: a made-up message type is cached (the cache outgrows the series)",
        V + "telemetry/metrics.py",
        "        if (transport, kind, outcome) == given:\n"
        "            self._requests[given] = series",
        "        if True:\n            self._requests[given] = series",
        (
            "tests/test_metrics.py::"
            "test_requests_share_one_histogram_by_type_and_no_count_is_lost_across_threads",
        ),
    ),
    Mutant(
        "metrics: an observation at a bucket's bound is counted in the next bucket",
        V + "telemetry/tallies.py",
        "        at = bisect_left(self.bounds, seconds)",
        "        at = __import__('bisect').bisect_right(self.bounds, seconds)",
        (
            "tests/test_metrics.py::"
            "test_requests_share_one_histogram_by_type_and_no_count_is_lost_across_threads",
        ),
    ),
    # -- issue 53: checkspeed (row checks written inline) --
    Mutant(
        "row MAC encoding: the inline path writes a string without its length",
        V + "store/integrity.py",
        '            append(b"s" + _LENGTH(len(data)) + data)',
        '            append(b"s" + data)',
        ("tests/test_row_encoding.py::test_the_inline_encoding_is_the_definition",),
    ),
    Mutant(
        "reconcile: a purged version's purge event is never asked for (a purge fails verify)",
        RECONCILE_VERSIONS,
        'case((ConfigVersion.status == "purged", purged_audited), else_=None)',
        'case((ConfigVersion.status == "never", purged_audited), else_=None)',
        (
            "tests/test_row_encoding.py::"
            "test_a_version_purged_with_its_event_verifies_and_the_status_column_alone_does_not",
        ),
    ),
    # -- issue 52/54: a checkout or bind under a directory closed to a root vault's sandbox --
    Mutant(
        "serve says nothing of a bound directory its root sandbox user cannot reach",
        V + "toolkits/served.py",
        "    return unreachable((settings.private_root, *settings.read_only, *settings.packages))",
        "    return None",
        (
            "tests/test_imported_servers.py::test_serve_names_a_directory_its_sandbox_user_cannot_reach",
        ),
    ),
    Mutant(
        "the reachability check reads a closed directory as open",
        V + "sandbox/launch.py",
        "        if not info.st_mode & stat.S_IXOTH and info.st_uid != SANDBOX_UID:",
        "        if False:",
        (
            "tests/test_imported_servers.py::test_serve_names_a_directory_its_sandbox_user_cannot_reach",
        ),
    ),
    # -- issue 53: verifyspeed (one-pass versions: `backup verify` and `check --full` open each
    # version as reconcile reads and MACs it) --
    Mutant(
        "one-pass versions: a row that fails its MAC is handed on as authentic (opened)",
        RECONCILE,
        "                    versions(row, holds)",
        "                    versions(row, True)",
        (
            BACKUP_TESTS
            + "test_backup_verify_names_each_version_that_fails_its_mac_decryption_or_the_chain",
        ),
    ),
    Mutant(
        "one-pass versions: reconcile hands no row on (none is opened or counted)",
        RECONCILE,
        "if versions is not None and table == VERSIONS:",
        'if versions is not None and table == "none":',
        (
            BACKUP_TESTS
            + "test_backup_verify_names_each_version_that_fails_its_mac_decryption_or_the_chain",
        ),
    ),
    Mutant(
        "one-pass versions: not held to the walk's state",
        V + "keys/version_check.py",
        "        self.tally = VersionTally(chain, workers(versions))",
        "        self.tally = VersionTally(None, workers(versions))",
        (
            BACKUP_TESTS
            + "test_backup_verify_names_each_version_that_fails_its_mac_decryption_or_the_chain",
        ),
    ),
    Mutant(
        "a version's tally counts it intact without opening it",
        V + "keys/opening.py",
        "        crypto.open_config(ring, context, sealed)",
        "        pass",
        (
            BACKUP_TESTS
            + "test_backup_verify_names_each_version_that_fails_its_mac_decryption_or_the_chain",
        ),
    ),
    # -- issue 53 (checkcores): versions opened by worker children --
    Mutant(
        "version workers: a worker answers that every row opens",
        V + "keys/opening.py",
        "out.append(OPENS if opens(ring, dict(zip(COLUMNS, values, strict=True))) else FAILS)",
        "out.append(OPENS)",
        (WORKERS + "test_workers_give_the_one_core_report_row_for_row",),
    ),
    Mutant(
        "version workers: a batch opened here while the workers are busy counts as opened",
        V + "keys/version_check.py",
        "answer = bytes(_opened(ring, values) for values in rows)",
        "answer = bytes(OPENS for values in rows)",
        (WORKERS + "test_workers_give_the_one_core_report_row_for_row",),
    ),
    Mutant(
        "version workers: a batch's answers counted against the wrong rows",
        V + "keys/version_check.py",
        "answers = iter(answer)",
        "answers = iter(answer[::-1])",
        (WORKERS + "test_workers_give_the_one_core_report_row_for_row",),
    ),
    Mutant(
        "version workers: a dead worker's missing answers count as opened",
        V + "keys/version_check.py",
        "        if data is None:\n            raise StoreError(",
        "        if data is None:\n"
        "            return bytes([OPENS]) * size\n"
        "            raise StoreError(",
        (WORKERS + "test_a_worker_that_dies_fails_the_check_and_is_reaped",),
    ),
    Mutant(
        "version workers: a ring grown during the check is not sent to the workers",
        V + "keys/version_check.py",
        "material = None if ring is self._ring else ring.reveal()",
        "material = None if self._ring is not None else ring.reveal()",
        (WORKERS + "test_a_ring_that_grows_during_the_check_reaches_the_workers",),
    ),
    Mutant(
        "version workers: a row whose opening raised in a worker counts as not decrypting",
        V + "keys/version_check.py",
        "                    if code == RAISED:",
        "                    if False:",
        (WORKERS + "test_a_row_that_raises_in_a_worker_is_opened_again_here",),
    ),
    Mutant(
        "the upgrade signs rows over an audit chain that does not verify",
        V + "audit/upgrade.py",
        'if chain.problem not in (None, "unaudited", "state"):',
        "if False:",
        ("tests/test_upgrade.py::test_a_broken_chain_stops_the_upgrade",),
    ),
    # -- issues 50/51 (callpath): the call's checks reused by its record and its result --
    Mutant(
        "withheld: a result's text not found to hold a secret JSON escapes is let through",
        V + "tools/withhold.py",
        "        if self._verbatim and self._pattern.search(text) is None:",
        "        if self._pattern.search(text) is None:",
        (TOOL_CALLS + "test_the_results_text_is_searched_as_its_values_are",),
    ),
    Mutant(
        "withheld: a match the result's text shows is taken for a secret in its values",
        V + "tools/withhold.py",
        "            return False\n        return self.withholds(result)",
        "            return False\n        return True",
        (TOOL_CALLS + "test_the_results_text_is_searched_as_its_values_are",),
    ),
    Mutant(
        "tool call: the record's arguments_hmac is not of the arguments the call checked",
        V + "core/tool_calls.py",
        "digest = canonical_hmac(self._call_hmac_key, checked.canonical)",
        'digest = canonical_hmac(self._call_hmac_key, b"{}")',
        (
            "tests/test_tool_call_records.py::"
            "test_a_call_is_recorded_in_the_store_with_the_hmac_audit_hash_gives",
        ),
    ),
    Mutant(
        "CLI start-up: the settings import pydantic-settings at their top again",
        V + "settings.py",
        "from toolkit_vault.crypto import SecretBytes\n",
        "from pydantic_settings import BaseSettings  # noqa\n"
        "from toolkit_vault.crypto import SecretBytes\n",
        (
            "tests/test_cli_startup.py::test_a_listing_imports_nothing_of_the_serving_side",
            "tests/test_cli_startup.py::test_toolkits_list_imports_no_mcp_sdk_and_no_vault",
        ),
    ),
    Mutant(
        "settings: a boolean variable that is no boolean word reads as false",
        V + "settings.py",
        "        if word not in _TRUE | _FALSE:\n",
        "        if word not in _TRUE | _FALSE and False:\n",
        ("tests/test_settings_env.py",),
    ),
    Mutant(
        "CLI start-up: the metrics import prometheus_client at their top again",
        V + "telemetry/metrics.py",
        "from toolkit_vault.telemetry.readings import Readings\n",
        "from toolkit_vault.telemetry.readings import Readings\n"
        "from prometheus_client import CollectorRegistry  # noqa\n",
        (
            "tests/test_cli_startup.py::test_a_listing_imports_nothing_of_the_serving_side",
            "tests/test_cli_startup.py::test_toolkits_list_imports_no_mcp_sdk_and_no_vault",
            "tests/test_metrics.py::test_prometheus_client_is_imported_at_the_first_use_of_the_registry",
        ),
    ),
    Mutant(
        "CLI start-up: the tallies import prometheus_client at their top again",
        V + "telemetry/tallies.py",
        "from typing import TYPE_CHECKING\n",
        "from typing import TYPE_CHECKING\n\nfrom prometheus_client.core import Metric  # noqa\n",
        (
            "tests/test_cli_startup.py::test_a_listing_imports_nothing_of_the_serving_side",
            "tests/test_cli_startup.py::test_toolkits_list_imports_no_mcp_sdk_and_no_vault",
            "tests/test_metrics.py::test_prometheus_client_is_imported_at_the_first_use_of_the_registry",
        ),
    ),
    Mutant(
        "CLI start-up: the readings import prometheus_client at their top again",
        V + "telemetry/readings.py",
        "from typing import TYPE_CHECKING, NamedTuple\n",
        "from typing import TYPE_CHECKING, NamedTuple\n\n"
        "from prometheus_client.registry import Collector  # noqa\n",
        (
            "tests/test_cli_startup.py::test_a_listing_imports_nothing_of_the_serving_side",
            "tests/test_cli_startup.py::test_toolkits_list_imports_no_mcp_sdk_and_no_vault",
            "tests/test_metrics.py::test_prometheus_client_is_imported_at_the_first_use_of_the_registry",
        ),
    ),
    Mutant(
        "CLI start-up: toolkits list imports what runs imported servers with none stored",
        V + "bootstrap.py",
        "imported = not listing or any_imported(store)",
        "imported = True",
        ("tests/test_cli_startup.py::test_toolkits_list_imports_no_mcp_sdk_and_no_vault",),
    ),
    Mutant(
        "toolkits list: a stored definition is left out of the listing",
        V + "bootstrap.py",
        "imported = not listing or any_imported(store)",
        "imported = not listing",
        (
            "tests/test_cli_startup.py::"
            "test_toolkits_list_loads_the_imported_side_when_a_definition_is_stored",
        ),
    ),
    Mutant(
        "CLI start-up: toolkits list builds the registry with nothing but the built-in",
        V + "bootstrap.py",
        "if imported or group(ENTRY_POINT_GROUP):",
        "if True:",
        ("tests/test_cli_startup.py::test_toolkits_list_imports_no_mcp_sdk_and_no_vault",),
    ),
    Mutant(
        "toolkits list: an installed plugin's toolkits are left out of the listing",
        V + "bootstrap.py",
        "if imported or group(ENTRY_POINT_GROUP):",
        "if imported:",
        ("tests/test_cli.py::test_toolkits_list_json",),
    ),
    Mutant(
        "toolkits list: the built-in toolkit's line is not its definition's",
        V + "toolkits/listing.py",
        'canonical_digest(f["schema"])',
        "canonical_digest({})",
        ("tests/test_cli_startup.py::test_the_built_in_toolkits_line_is_the_registrys",),
    ),
    Mutant(
        "CLI start-up: a command's objects are walked by the collections at its exit",
        V + "cli/__init__.py",
        "    atexit.register(gc.freeze)\n",
        "",
        ("tests/test_cli_startup.py::test_a_commands_objects_are_frozen_at_its_exit",),
    ),
    Mutant(
        "CLI: untrusted text reaches the terminal unescaped",
        V + "terminal.py",
        "c if c.isprintable() else repr(c)[1:-1]",
        "c",
        (
            "tests/test_cli_tables.py::test_untrusted_text_is_escaped_where_a_terminal_would_act_on_it",
        ),
    ),
    # -- issue 51 (sdkpath): a call taken as the checked wire JSON, handed over in batches --
    Mutant(
        "mcp client: structured content its tool's output schema refuses is taken",
        V + "mcp_client/results.py",
        "        if not valid:\n",
        "        if False:\n",
        (RESULTS + "test_structured_content_its_output_schema_refuses_is_no_result",),
    ),
    Mutant(
        "mcp client: a result without the structured content its schema asks for is taken",
        V + "mcp_client/results.py",
        "        if not present:\n",
        "        if False:\n",
        (RESULTS + "test_structured_content_its_output_schema_refuses_is_no_result",),
    ),
    Mutant(
        "mcp client: a result asking for input is taken as the tool's result",
        V + "mcp_client/results.py",
        'if raw.get("resultType") == "input_required":',
        "if False:",
        (RESULTS + "test_on_2026_07_28_a_result_asking_for_input_is_no_result",),
    ),
    Mutant(
        "mcp client: an error result is held to the output schema",
        V + "mcp_client/results.py",
        'if raw.get("isError") is not True:',
        "if True:",
        (RESULTS + "test_an_error_result_is_not_held_to_the_output_schema",),
    ),
    Mutant(
        "mcp client: an answer of no revision's shape escapes as the validator's error",
        V + "mcp_client/session.py",
        "        except ValidationError:",
        "        except ZeroDivisionError:",
        (RESULTS + "test_an_answer_that_is_no_tool_result_fails_without_its_text",),
    ),
    Mutant(
        "mcp client: a line from the server over the bound no longer ends the session",
        V + "mcp_client/stdio.py",
        "        if len(buffer) > MAX_MESSAGE_BYTES:\n",
        "        if False:\n",
        (RESULTS + "test_a_line_over_the_bound_ends_the_session",),
    ),
    Mutant(
        "mcp client: coroutines handed over together all run in the first caller's context",
        V + "mcp_client/host.py",
        "_settled(coro, future), context=context)",
        "_settled(coro, future), context=handed[0][2])",
        (RESULTS + "test_coroutines_handed_over_together_run_each_in_its_callers_context",),
    ),
    Mutant(
        "mcp client: a call's future cancelled by its waiter leaves the call running",
        V + "mcp_client/host.py",
        "    if future.cancelled():\n        loop.call_soon_threadsafe(task.cancel)",
        "    if False:\n        loop.call_soon_threadsafe(task.cancel)",
        (RESULTS + "test_a_future_cancelled_while_its_coroutine_runs_cancels_it",),
    ),
    Mutant(
        "mcp client: a server's output schema run on jsonschema and Python's re (not RE2)",
        V + "schema/compiled.py",
        "    return compile_schema(schema).is_valid",
        "    from jsonschema.validators import validator_for\n\n"
        "    return validator_for(schema)(schema).is_valid",
        (RESULTS + "test_an_output_schemas_pattern_runs_in_linear_time",),
    ),
    # -- issue 53: backupload (the scratch copy builds its secondary indexes after its rows) --
    Mutant(
        "backup verify: the scratch copy's secondary indexes are not built again after its rows",
        V + "store/snapshots.py",
        "        for index in _SECONDARY:\n            index.create(conn)\n",
        "",
        (
            BACKUP_TESTS
            + "test_a_row_the_scratch_copy_refuses_refuses_the_backup_and_its_indexes_stay",
        ),
    ),
    Mutant(
        "backup verify: a row the database refuses does not refuse the backup",
        BACKUP + "check.py",
        "    except RowsRefused as exc:\n        raise BackupError",
        "    except RowsRefused as exc:\n        return\n        raise BackupError",
        (
            BACKUP_TESTS
            + "test_a_row_the_scratch_copy_refuses_refuses_the_backup_and_its_indexes_stay",
        ),
    ),
    # -- issue 53: bv2 (backup verify's lines parsed by a child; the walk's batches shared) --
    Mutant(
        "backup verify: the parsing child takes its parent's digest of the bytes before it",
        BACKUP + "parsing.py",
        "            if reader.digest.copy().digest() != hashed:\n",
        "            if False:\n",
        (
            "tests/test_backup_parsing.py::"
            + "test_a_file_changed_after_its_header_was_read_is_refused",
        ),
    ),
    Mutant(
        "backup verify: the rows parsed before the child took over are not counted",
        BACKUP + "parsing.py",
        "counts, hashed = dict(reader.counts), reader.digest.copy().digest()",
        "counts, hashed = {}, reader.digest.copy().digest()",
        ("tests/test_backup_parsing.py::test_a_child_parses_to_the_same_verdicts",),
    ),
    Mutant(
        "backup verify: a parsing child that dies ends the rows as if the file ended",
        BACKUP + "parsing.py",
        '        raise BackupError("the backup\'s reader ended early") from None\n',
        '        return (END, None, {}, b"")\n',
        ("tests/test_backup_parsing.py::test_a_child_that_dies_fails_the_verify",),
    ),
    Mutant(
        "audit links: a batch checked here while the workers are busy always holds",
        V + "audit/walk.py",
        "pending.append((previous, rows, _Found(first_bad(key, previous, rows))))",
        "pending.append((previous, rows, _Found(None)))",
        ("tests/test_link_workers.py",),
    ),
    Mutant(
        "audit links: a worker's answer that the first link is bad read as none bad",
        V + "audit/walk.py",
        "return None if bad < 0 else int(bad)",
        "return None if bad <= 0 else int(bad)",
        ("tests/test_link_workers.py",),
    ),
    # -- a flake of the CI of 9409286: `init`'s witness left to the flusher thread --
    Mutant(
        "init: the witness it remakes is left to the flusher thread and the exit",
        V + "bootstrap.py",
        "            store.witness.flush()  # flusher thread",
        "            pass  # flusher thread",
        REPLAY_TESTS,
        select="init_writes_the_witness and not postgres",
    ),
]


def run(mutant: Mutant, scratch: Path) -> tuple[str, float]:
    originals = {path: (ROOT / "service" / path).read_text() for path, _, _ in mutant.edits}
    mutated = dict(originals)
    for path, find, replace in mutant.edits:
        if mutated[path].count(find) != 1:
            return "stale", 0.0
        mutated[path] = mutated[path].replace(find, replace)
    for path, text in mutated.items():
        (scratch / "service" / path).write_text(text)
    paths = [str(scratch / "service"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider"]
    command += [*(["-k", mutant.select] if mutant.select else []), *mutant.tests]
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, timeout=TIMEOUT, check=False
        )
        code = done.returncode
    except subprocess.TimeoutExpired:
        code = -1
    finally:
        for path, text in originals.items():
            (scratch / "service" / path).write_text(text)
    took = time.monotonic() - started
    # 1: tests failed. 2-5 (interrupted, usage, internal, nothing collected): the mutant
    # broke the run itself, which proves nothing about the protection.
    verdict = {0: "survived", 1: "killed", -1: "timeout"}.get(code, f"error ({code})")
    return verdict, took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", default="", help="only mutants whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument(
        "-j", "--jobs", type=int, default=1, help="mutants run at once, each in a scratch copy"
    )
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.k.lower() in m.name.lower()]
    if args.list:
        for mutant in chosen:
            print(mutant.name)
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="tkv-mutants-") as where:
        scratches: queue.SimpleQueue[Path] = queue.SimpleQueue()
        for n in range(max(1, args.jobs)):
            scratch = Path(where) / str(n)
            shutil.copytree(ROOT / "service", scratch / "service")
            shutil.copytree(ROOT / "migrations", scratch / "migrations")
            scratches.put(scratch)

        def in_a_scratch(mutant: Mutant) -> tuple[str, float]:
            scratch = scratches.get()
            try:
                return run(mutant, scratch)
            finally:
                scratches.put(scratch)

        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            running = {pool.submit(in_a_scratch, mutant): mutant for mutant in chosen}
            for done in as_completed(running):
                verdict, took = done.result()
                results.append((running[done].name, verdict))
                print(f"{verdict:>10}  {took:6.1f}s  {running[done].name}", flush=True)
    killed = sum(verdict == "killed" for _, verdict in results)
    print(f"\n{killed}/{len(results)} mutants killed")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
