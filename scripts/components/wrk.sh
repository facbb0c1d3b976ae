# wrk and a C compiler: the benchmarks' http scenario drives servers with wrk and with
# benchmarks/wsload.c, and tests/test_bench.py runs that scenario at a tiny scale.
# Sourced by scripts/test. Quick when installed; installs the Debian packages otherwise and
# fails loudly when it cannot.
wrk_missing=()
command -v wrk >/dev/null 2>&1 || wrk_missing+=(wrk)
command -v cc >/dev/null 2>&1 || wrk_missing+=(gcc libc6-dev)
if [ "${#wrk_missing[@]}" -gt 0 ]; then
    echo "installing ${wrk_missing[*]} (the bench's load generators)..." >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "${wrk_missing[*]} missing and this user cannot apt-get install them" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q "${wrk_missing[@]}" >&2; then
        apt-get update -q >&2
        apt-get install -y -q "${wrk_missing[@]}" >&2
    fi
fi
unset wrk_missing
