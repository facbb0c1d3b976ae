# bubblewrap (`bwrap`): the sandbox imported MCP servers run in (toolkit_vault.sandbox), and
# tests/test_sandbox.py's hostile process. Sourced by scripts/test. Quick when installed;
# installs the Debian package otherwise (running `apt-get update` once when the package is
# unknown) and fails loudly when it cannot. prlimit and setpriv (util-linux) and env
# (coreutils) are part of every Debian system; checked, not installed.
if ! command -v bwrap >/dev/null 2>&1; then
    echo "installing bubblewrap (the sandbox of imported servers)..." >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "bubblewrap is missing and only root can apt-get install it" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-cache show bubblewrap >/dev/null 2>&1; then
        apt-get update -q >&2 || { echo "bubblewrap.sh: apt-get update failed" >&2; exit 1; }
    fi
    apt-get install -y -q bubblewrap >&2 \
        || { echo "bubblewrap.sh: apt-get install bubblewrap failed" >&2; exit 1; }
fi
for program in bwrap prlimit setpriv env; do
    command -v "$program" >/dev/null 2>&1 \
        || { echo "bubblewrap.sh: $program missing (the sandbox needs it)" >&2; exit 1; }
done
# User namespaces must work for the user the tests run as: say so here, not in 10 tests.
bwrap --unshare-all --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib \
    --symlink usr/lib64 /lib64 --proc /proc --dev /dev -- /usr/bin/true 2>/dev/null \
    || { echo "bubblewrap.sh: bwrap cannot make namespaces here (user namespaces off?)" >&2; exit 1; }
unset program
