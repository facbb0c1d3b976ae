"""Compiled load generators for the `http` scenario: `wrk` (HTTP) and `wsload` (WebSocket).

Both are closed-loop: each connection sends its next request when the previous answer is
in, so throughput and latency are those of the server at that concurrency. `wrk` comes from
the system packages (`scripts/bench` installs it when missing); `wsload` is compiled here
from `wsload.c` with the system's C compiler. Every answer is checked: an HTTP status other
than 200, or an A2E `error` body, counts as an error, and a run with errors is refused.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Load", "build_wsload", "run_wrk", "run_wsload", "wrk_path"]

HERE = Path(__file__).resolve().parent
_MARK = "WRK_JSON "

_SCRIPT = """
local tokens = {%(tokens)s}
local sessions = {%(sessions)s}
local template = %(body)s
local n, i, counter = #tokens, 0, 0
errors, sample = 0, ""
local threads = {}

setup = function(thread) table.insert(threads, thread) end

request = function()
  i = i %% n + 1
  counter = counter + 1
  local body = template
  if string.find(template, "%%d", 1, true) then body = string.format(template, counter) end
  return wrk.format("POST", "/a2e", {
    ["Authorization"] = "Bearer " .. tokens[i],
    ["A2E-Session"] = sessions[i],
    ["Content-Type"] = "application/json",
  }, body)
end

response = function(status, headers, body)
  if status ~= 200 or string.find(body, '"type":"error"', 1, true) then
    if errors == 0 then sample = tostring(status) .. " " .. string.sub(body, 1, 160) end
    errors = errors + 1
  end
end

done = function(summary, latency, requests)
  local errs, first = 0, ""
  for _, t in ipairs(threads) do
    errs = errs + t:get("errors")
    if first == "" then first = t:get("sample") end
  end
  local e = summary.errors
  io.write(string.format(
    '%(mark)s{"requests": %%d, "seconds": %%.3f, "p50_ms": %%.3f, "p99_ms": %%.3f, ' ..
    '"errors": %%d, "socket_errors": %%d, "error_sample": "%%s"}\\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, errs, e.connect + e.read + e.write + e.timeout,
    (string.gsub(first, '[%%c"\\92]', "'"))))
end
"""


@dataclass(frozen=True)
class Load:
    """One run of a load generator against one server."""

    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


def wrk_path() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise SystemExit("scripts/bench: wrk is missing; scripts/bench installs it with apt-get")
    return found


def _lua_list(values: list[str]) -> str:
    return ", ".join(json.dumps(v) for v in values)  # JSON string escapes are Lua's too


def run_wrk(
    port: int,
    tokens: list[str],
    sessions: list[str],
    body: str,
    connections: int,
    seconds: float,
    work: Path,
) -> Load:
    """`wrk -t1` POSTing `body` (its `%d`, if any, numbered per request) to `/a2e`."""
    script = work / f"wrk-{port}-{connections}.lua"
    script.write_text(
        _SCRIPT
        % {
            "tokens": _lua_list(tokens),
            "sessions": _lua_list(sessions),
            "body": json.dumps(body),
            "mark": _MARK,
        }
    )
    command = [
        wrk_path(),
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",  # whole seconds only
        "--timeout",
        "10s",
        "-s",
        str(script),
        f"http://127.0.0.1:{port}/a2e",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    line = next((x for x in done.stdout.splitlines() if x.startswith(_MARK)), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed: {done.stderr.strip() or done.stdout.strip()}")
    data = json.loads(line[len(_MARK) :])
    if data["errors"] or data["socket_errors"] or not data["requests"]:
        raise RuntimeError(f"wrk saw errors against port {port}: {data}")
    return Load(data["requests"], data["seconds"], data["p50_ms"], data["p99_ms"])


def build_wsload(work: Path) -> Path:
    """Compile `wsload.c` (libc only) into `work`; returns the binary."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("scripts/bench: no C compiler; scripts/bench installs gcc with apt-get")
    binary = work / "wsload"
    source = HERE / "wsload.c"
    subprocess.run([compiler, "-O2", "-o", str(binary), str(source)], check=True)
    return binary


def run_wsload(
    binary: Path,
    port: int,
    tokens: list[str],
    opening: str | None,
    message: str,
    frames: int,
    connections: int,
    seconds: float,
    work: Path,
) -> Load:
    token_file = work / f"tokens-{port}.txt"
    token_file.write_text("\n".join(tokens) + "\n")
    command = [
        str(binary),
        *("--port", str(port), "--connections", str(connections)),
        *("--duration", f"{seconds:g}", "--tokens", str(token_file)),
        *("--message", message, "--frames", str(frames)),
        *(("--open", opening) if opening else ()),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise RuntimeError(f"wsload failed: {done.stderr.strip()}")
    data = json.loads(done.stdout)
    if data["errors"] or not data["requests"]:
        raise RuntimeError(f"wsload saw errors against port {port}: {data}")
    return Load(data["requests"], data["seconds"], data["p50_ms"], data["p99_ms"])
