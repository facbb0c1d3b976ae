# The published MCP servers tests/test_mcp_client*.py launch (issue 51): PyPI's
# mcp-server-time and mcp-server-git in a venv of their own (their pins are theirs, not the
# vault's), npm's server-everything and server-filesystem in a node_modules of their own.
# Sourced by scripts/test. Cached in TKV_MCP_SERVERS (default ~/.cache/toolkit-vault/mcp-servers);
# quick when both are there, installs them otherwise and fails loudly when it cannot. The
# tests find the cache through the same variable (tests/mcp_support.py). As root the cache
# is /var/cache/toolkit-vault/mcp-servers: the sandbox then runs servers as nobody, who
# cannot pass through /root; and the venv is made from /usr/bin/python3, an interpreter
# nobody can run (not one under a home directory).
if [ "$(id -u)" = 0 ]; then
    mcp_servers="${TKV_MCP_SERVERS:-/var/cache/toolkit-vault/mcp-servers}"
else
    mcp_servers="${TKV_MCP_SERVERS:-$HOME/.cache/toolkit-vault/mcp-servers}"
fi
export TKV_MCP_SERVERS="$mcp_servers"
mcp_python_servers=(mcp-server-time mcp-server-git)
mcp_node_servers=(@modelcontextprotocol/server-everything @modelcontextprotocol/server-filesystem)
# Our own test servers (tests/mcp_servers) import the SDK from this venv too, at our lock's
# version: the sandbox's user can reach it wherever the checkout lies (tests/mcp_support.py).
mcp_sdk="mcp==$(sed -n 's/^mcp==\([^ ]*\).*/\1/p' "${BASH_SOURCE[0]%/*}/../../requirements/lock.txt")"
if ! [ -x "$mcp_servers/venv/bin/mcp-server-time" ] || ! [ -x "$mcp_servers/venv/bin/mcp-server-git" ] \
    || ! "$mcp_servers/venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(f'mcp=={m.version(\"mcp\")}' != '$mcp_sdk')" 2>/dev/null; then
    echo "installing ${mcp_python_servers[*]} ($mcp_sdk) into $mcp_servers/venv..." >&2
    mkdir -p -m 755 "$mcp_servers"
    /usr/bin/python3 -m venv "$mcp_servers/venv" >&2 \
        || { echo "mcp_servers.sh: /usr/bin/python3 -m venv failed" >&2; return 1; }
    "$mcp_servers/venv/bin/pip" install -q "${mcp_python_servers[@]}" "$mcp_sdk" >&2 \
        || { echo "mcp_servers.sh: pip install ${mcp_python_servers[*]} failed" >&2; return 1; }
fi
if ! [ -f "$mcp_servers/node/node_modules/@modelcontextprotocol/server-everything/package.json" ] \
    || ! [ -f "$mcp_servers/node/node_modules/@modelcontextprotocol/server-filesystem/package.json" ]; then
    command -v npm >/dev/null 2>&1 || { echo "mcp_servers.sh: npm missing (Node 20 is expected)" >&2; return 1; }
    echo "installing ${mcp_node_servers[*]} into $mcp_servers/node..." >&2
    mkdir -p "$mcp_servers/node"
    npm install --silent --no-audit --no-fund --prefix "$mcp_servers/node" "${mcp_node_servers[@]}" >&2 \
        || { echo "mcp_servers.sh: npm install ${mcp_node_servers[*]} failed" >&2; return 1; }
fi
unset mcp_servers mcp_python_servers mcp_node_servers mcp_sdk
