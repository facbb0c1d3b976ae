# Headless Chromium and its WebDriver (Debian `chromium`, `chromium-driver`) for the browser
# tests in tests/web/. Sourced by scripts/test: quick when both binaries are present,
# otherwise installs them (running `apt-get update` first when the package is unknown)
# and fails loudly when it cannot.
if ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/chromedriver ]; then
    echo "installing chromium and chromium-driver for the browser tests..." >&2
    if ! apt-cache show chromium-driver >/dev/null 2>&1; then
        apt-get update -qq >&2 || { echo "chromium.sh: apt-get update failed" >&2; return 1; }
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >&2 \
        || { echo "chromium.sh: apt-get install chromium chromium-driver failed" >&2; return 1; }
    for binary in /usr/bin/chromium /usr/bin/chromedriver; do
        [ -x "$binary" ] || { echo "chromium.sh: $binary missing after install" >&2; return 1; }
    done
fi
