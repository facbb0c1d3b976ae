"""`toolkit-vault` for a shell script under test, as a fork of the test worker's fork server
(`cli_support`) instead of a new interpreter: each command a script runs cost a start-up
and the imports of the CLI, which are not what a test of the script's own logic is about.

`script_env` gives the script a bash function `toolkit-vault` (bash reads exported
functions from the environment, and a function wins over PATH, so also over the
`.venv/bin` that `scripts/_venv` puts first); the function runs this file with the Python
of the tests, which hands its own stdin, stdout and stderr, environment, directory and
arguments to the fork server and exits with the command's status, as the console script
would have.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Mapping

_SOCKET = "TKV_TEST_FORK_SERVER"
_FUNCTION = "BASH_FUNC_toolkit-vault%%"


def script_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a script whose `toolkit-vault` commands are forked (bash scripts only)."""
    from cli_support import CLI, fork_server

    client = f"{sys.executable} -I -S {__file__}"
    return {
        **env,
        _SOCKET: f"{fork_server(env)}\n{CLI}",
        _FUNCTION: "() { " + client + ' "$@"; }',
    }


def main() -> int:
    path, cli = os.environ.pop(_SOCKET).split("\n")
    os.environ.pop(_FUNCTION, None)
    request = {"argv": [cli, *sys.argv[1:]], "env": dict(os.environ), "cwd": os.getcwd()}
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(path)
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
        replies = conn.makefile("rb")
        replies.readline()  # the command's pid
        status = int(replies.readline())
    return status if status >= 0 else 128 - status  # killed by a signal: as a shell says


if __name__ == "__main__":
    sys.exit(main())
