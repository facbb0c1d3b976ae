# SoftHSM2: the PKCS#11 token the pkcs11 key provider's tests run against (tests/providers).
# Sourced by scripts/test. Quick when installed; installs the Debian package otherwise and
# fails loudly when it cannot. The tests create their own token in a temporary directory.
softhsm2_module=/usr/lib/softhsm/libsofthsm2.so
if [ ! -f "$softhsm2_module" ] || ! command -v softhsm2-util >/dev/null 2>&1; then
    echo "installing softhsm2 (the PKCS#11 token for the key provider tests)..." >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "softhsm2 is missing and only root can apt-get install it" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q softhsm2 >&2 2>/dev/null; then
        apt-get update -q >&2 || { echo "apt-get update failed" >&2; exit 1; }
        apt-get install -y -q softhsm2 >&2 || { echo "apt-get install softhsm2 failed" >&2; exit 1; }
    fi
    if [ ! -f "$softhsm2_module" ] || ! command -v softhsm2-util >/dev/null 2>&1; then
        echo "softhsm2 installed, but $softhsm2_module or softhsm2-util is missing" >&2
        exit 1
    fi
fi
export TOOLKIT_VAULT_TEST_PKCS11_MODULE="${TOOLKIT_VAULT_TEST_PKCS11_MODULE:-$softhsm2_module}"
