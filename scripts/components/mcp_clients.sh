# MCP clients nobody here wrote, from npm: the TypeScript SDK (`@modelcontextprotocol/sdk`)
# and the MCP Inspector's CLI mode (`@modelcontextprotocol/inspector --cli`), which
# tests/test_mcp_endpoint_clients_npm.py drives against /mcp. Installed once into
# $TKV_NPM_CACHE (default ~/.cache/toolkit-vault/mcp-clients); quick when installed; fails
# loudly when Node or npm is missing or the install fails. Sourced by scripts/test.
mcp_clients_dir="${TKV_NPM_CACHE:-$HOME/.cache/toolkit-vault/mcp-clients}"
if [ ! -x "$mcp_clients_dir/node_modules/.bin/mcp-inspector" ] \
    || [ ! -d "$mcp_clients_dir/node_modules/@modelcontextprotocol/sdk" ]; then
    command -v npm >/dev/null 2>&1 || { echo "npm missing: the MCP client tests need Node 20+" >&2; exit 1; }
    echo "installing the MCP TypeScript SDK and Inspector into $mcp_clients_dir..." >&2
    mkdir -p "$mcp_clients_dir"
    (cd "$mcp_clients_dir" && [ -f package.json ] || echo '{"private": true}' > package.json)
    npm install --prefix "$mcp_clients_dir" --no-audit --no-fund --silent \
        @modelcontextprotocol/sdk @modelcontextprotocol/inspector >&2
fi
export TKV_MCP_CLIENTS="$mcp_clients_dir"
unset mcp_clients_dir
