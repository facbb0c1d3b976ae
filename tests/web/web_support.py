"""Helpers of the web tests: a real `toolkit-vault serve`, an agent on a real WebSocket,
headless Chromium, screenshots checked by their accessible labels, canary scans."""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.wait import WebDriverWait
from sqlalchemy import create_engine, text
from websockets.sync.client import ClientConnection, connect

from cli_support import spawn_cli
from toolkit_vault.access.principals import create_token
from toolkit_vault.core.vault import Vault
from toolkit_vault.store.models import Base
from toolkit_vault.toolkits.registry import SourceKind, ToolkitRegistry, ToolkitSource

HERE = Path(__file__).parent
PLUGINS = HERE / "plugins"
VERIFY_PLUGINS = HERE / "verify_plugins"  # toolkits whose plugins check a credential
VERIFY_GOOD = "tkv-canary-browser-good-71d3"  # the credential they accept (tkv_verify_plugins)
CLI = str(Path(sys.executable).parent / "toolkit-vault")
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}
CONTROLS = "input:not([type=hidden]), select, textarea, button"


def _load_plugins() -> ModuleType:
    """The web test toolkits, imported by path: putting their dist-info on sys.path would
    add them to every other test's registry."""
    spec = importlib.util.spec_from_file_location("tkv_web_plugins", PLUGINS / "tkv_web_plugins.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tkv_web_plugins"] = module
    spec.loader.exec_module(module)
    return module


plugins = _load_plugins()


def web_registry() -> ToolkitRegistry:
    registry = ToolkitRegistry.default()
    registry.register(plugins.LedgerToolkit, ToolkitSource(SourceKind.ENTRY_POINT, "test"))
    registry.register(plugins.EverythingToolkit, ToolkitSource(SourceKind.ENTRY_POINT, "test"))
    return registry


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A running `toolkit-vault serve`, and the same vault opened in this process."""

    base: str
    vault: Vault
    log: Path
    proofs: Path

    def token(self, role: str, name: str) -> str:
        return create_token(self.vault.store, role, name)[1]

    def proof(self, toolkit: str) -> list[dict[str, Any]]:
        found = sorted(self.proofs.glob(f"{toolkit}-*.json"), key=lambda p: p.stat().st_mtime)
        return [json.loads(p.read_text()) for p in found]


@contextlib.contextmanager
def serve(env: dict[str, str], workdir: Path, vault: Vault, *plugins: Path) -> Iterator[Server]:
    """`toolkit-vault serve` with the web test toolkits (and those of `plugins`, folders
    of test plugin distributions) on its path."""
    port = free_port()
    proofs = workdir / "proofs"
    proofs.mkdir()
    env = {
        **env,
        "PYTHONPATH": os.pathsep.join(map(str, [PLUGINS, *plugins, env.get("PYTHONPATH", "")])),
        "TKV_WEB_PROOF_DIR": str(proofs),
    }
    log = workdir / "serve.log"
    args = ["serve", "--port", str(port), "--rate", "1000"]
    with log.open("w") as out:
        proc = spawn_cli(args, env, stdout=out, stderr=subprocess.STDOUT)  # forked: fast
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        try:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                        break
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            yield Server(base, vault, log, proofs)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@dataclass
class Agent:
    """An agent on a real WebSocket that keeps every message it receives."""

    ws: ClientConnection
    received: list[str] = field(default_factory=list)
    session_id: str = ""

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.ws.send(json.dumps(message))
        return self.next()

    def next(self, timeout: float = 30) -> dict[str, Any]:
        raw = self.ws.recv(timeout=timeout)
        self.received.append(str(raw))
        return dict(json.loads(raw))

    def configure(self, toolkit: str, config: dict[str, Any], **extra: Any) -> dict[str, Any]:
        message = {"type": "toolkit/configure/req", "toolkit_name": toolkit, "config": config}
        return self.ask({**message, **extra})

    def configured(self) -> dict[str, bool]:
        listed = self.ask({"type": "toolkit/list/req"})
        return {t["name"]: t["configured"] for t in listed["toolkits"]}


@contextlib.contextmanager
def agent(server: Server, token: str) -> Iterator[Agent]:
    ws_url = server.base.replace("http://", "ws://") + "/a2e"
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        client = Agent(ws)
        hello = client.ask(HELLO)
        assert hello["type"] == "handshake/resp", hello
        client.session_id = hello["session_id"]
        yield client


@contextlib.contextmanager
def chromium(workdir: Path) -> Iterator[WebDriver]:
    """Headless Chromium with a fresh profile and no background networking (the machine's
    network is closed; without these flags Chromium keeps trying Google's hosts)."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="chromium-", dir=workdir)
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
        "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--window-size=1200,1000",
        f"--user-data-dir={profile}",
    ):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def click_through(driver: WebDriver, element: WebElement) -> None:
    """Click a control that loads a new page, and wait until the old page is gone."""
    page = driver.find_element(By.TAG_NAME, "html")
    element.click()
    # Mid-navigation, chromedriver may answer "Node with given id does not belong to the
    # document" instead of "stale": ask again until the old page is gone.
    WebDriverWait(driver, 15, ignored_exceptions=(WebDriverException,)).until(staleness_of(page))


def labels(driver: WebDriver) -> list[str]:
    """The accessible name of every visible control, in page order."""
    return [el.accessible_name for el in driver.find_elements(By.CSS_SELECTOR, CONTROLS)]


def screenshot(driver: WebDriver, path: Path) -> list[str]:
    """Save a full-height screenshot and return the page's accessible labels at that
    moment. With TKV_SCREENSHOTS set, also copy it there (docs/screenshots)."""
    wanted = max(600, min(int(driver.execute_script("return document.body.scrollHeight")), 4000))
    driver.set_window_size(1200, wanted)
    chrome = wanted - int(driver.execute_script("return window.innerHeight"))
    driver.set_window_size(1200, wanted + max(0, chrome))  # the viewport, not the window
    assert driver.save_screenshot(str(path))
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 5000, path
    if os.environ.get("TKV_SCREENSHOTS"):
        shutil.copy(path, Path(os.environ["TKV_SCREENSHOTS"]) / path.name)
    return labels(driver)


def encodings(value: str) -> list[bytes]:
    raw = value.encode()
    return [
        raw,
        value.encode("utf-16-le"),
        base64.b64encode(raw),
        base64.urlsafe_b64encode(raw),
        raw.hex().encode(),
    ]


def assert_nowhere(canary: str, *, files: Sequence[Path] = (), texts: Sequence[str] = ()) -> None:
    for path in files:
        data = path.read_bytes()
        for encoded in encodings(canary):
            assert encoded not in data, f"canary in {path}"
    for text_ in texts:
        assert canary not in text_


def database_dump(url: str) -> list[Path]:
    """The database as files to scan: SQLite's own files (with WAL and shm), or for
    PostgreSQL every row of every table written out as text."""
    if url.startswith("sqlite"):
        db = Path(url.removeprefix("sqlite:///"))
        return [p for p in db.parent.iterdir() if p.name.startswith(db.name)]
    engine = create_engine(url)
    out = Path(tempfile.mkdtemp()) / "dump.txt"
    with engine.connect() as conn, out.open("w") as dump:
        for table in Base.metadata.sorted_tables:
            query = text(f"SELECT t::text FROM {table.name} t")  # noqa: S608 (our own tables)
            for (row,) in conn.execute(query):
                dump.write(row + "\n")
    engine.dispose()
    return [out]


WIDTHS = (1280, 390)  # a laptop and a phone


def sideways(driver: WebDriver, widths: tuple[int, ...] = WIDTHS) -> list[tuple[int, int]]:
    """(width, scrollWidth) for each window width at which the page scrolls sideways."""
    wide = []
    for width in widths:
        driver.set_window_size(width, 900)
        inner = int(driver.execute_script("return window.innerWidth"))
        scroll = int(driver.execute_script("return document.documentElement.scrollWidth"))
        if scroll > inner:
            wide.append((width, scroll))
    return wide


TABLE_WIDTHS = """
const fits = [];
for (const table of document.querySelectorAll("main table")) {
  const box = table.parentElement;
  const room = Math.min(box.clientWidth, document.documentElement.clientWidth);
  const right = table.getBoundingClientRect().right;
  const cells = [...table.querySelectorAll("td")].filter(c => c.offsetParent !== null);
  const widest = Math.max(0, ...cells.map(c => c.getBoundingClientRect().right
    + Math.max(0, c.scrollWidth - c.clientWidth)));  // a cell whose content spills over
  fits.push([
    table.id || (table.caption ? table.caption.textContent.trim() : "?"),
    Math.ceil(Math.max(table.scrollWidth, box.scrollWidth)), Math.floor(room),
    Math.ceil(Math.max(right, widest)), document.documentElement.clientWidth,
  ]);
}
return fits;
"""


def wide_tables(driver: WebDriver, widths: tuple[int, ...] = WIDTHS) -> list[tuple[Any, ...]]:
    """(window width, table, its width, the room it has) for each table of the page that is
    wider than its box or reaches past the window's edge at a width: a table that fits
    neither scrolls sideways in its own box nor hides a column past the edge."""
    wide: list[tuple[Any, ...]] = []
    for width in widths:
        driver.set_window_size(width, 900)
        for name, scroll, room, right, page in driver.execute_script(TABLE_WIDTHS):
            if scroll > room + 1 or right > page + 1:
                wide.append((width, name, scroll, room, right))
    return wide
