"""Wrap/unwrap latency per key provider, on the same real media as the tests:

    .venv/bin/python tests/providers/measure_latency.py [N]

Prints, per provider, the median (and 90th percentile) of N wraps and of N unwraps on a
warm provider, and the cold start: build the provider from settings and unwrap once, as a
process does at start. Not a test: phase 2 relies on "one unwrap per vault key at process
start, none per request", and these figures say what that start costs.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from provider_support import SOFTHSM_MODULE, TOKEN_LABEL, USER_PIN, MotoServer, make_softhsm_token

from toolkit_vault.crypto import new_key
from toolkit_vault.keys.providers import KeyProvider, ProviderSettings, load_provider
from toolkit_vault.keys.providers.document import KeyDocument
from toolkit_vault.keys.providers.testing import CONTEXT


def _ms(samples: list[float]) -> str:
    median = statistics.median(samples) * 1000
    p90 = statistics.quantiles(samples, n=10)[-1] * 1000
    return f"{median:8.3f} ms (p90 {p90:7.3f})"


def _timed(action: Callable[[], object], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return samples


def measure(name: str, make: Callable[[], KeyProvider], n: int) -> None:
    provider, key = make(), new_key()
    blob = provider.wrap(key, CONTEXT)
    wraps = _timed(lambda: provider.wrap(key, CONTEXT), n)
    unwraps = _timed(lambda: provider.unwrap(blob, CONTEXT), n)
    builds, firsts = [], []
    for _ in range(max(5, n // 10)):
        start = time.perf_counter()
        fresh = make()
        built = time.perf_counter()
        fresh.unwrap(blob, CONTEXT)
        builds.append(built - start)
        firsts.append(time.perf_counter() - built)
    print(f"{name:8} wrap {_ms(wraps)}  unwrap {_ms(unwraps)}")
    print(f"{'':8} cold: discover+build {_ms(builds)}  first unwrap {_ms(firsts)}")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory(prefix="tkv-latency-") as scratch:
        root = Path(scratch)

        def settings(**options: str) -> ProviderSettings:
            return ProviderSettings(root / "home", "vault-latency", options)

        print(f"median (p90) of {n} operations on a warm provider; cold: a fresh provider")
        load_provider("file", settings()).create_master_key()
        measure("file", lambda: load_provider("file", settings()), n)

        document = KeyDocument.first().dumps()

        def env_provider() -> KeyProvider:
            os.environ["TOOLKIT_VAULT_MASTER_KEYS"] = document
            return load_provider("env", settings())

        measure("env", env_provider, n)

        os.environ.update(
            AWS_ACCESS_KEY_ID="latency",
            AWS_SECRET_ACCESS_KEY="latency",
            AWS_DEFAULT_REGION="eu-west-1",
            AWS_EC2_METADATA_DISABLED="true",
        )
        moto = MotoServer(root / "moto.log")
        url = moto.start()
        try:
            kms = load_provider("aws-kms", settings(endpoint_url=url))
            arn = kms.create_master_key()
            measure(
                "aws-kms",
                lambda: load_provider("aws-kms", settings(key_id=arn, endpoint_url=url)),
                n,
            )
        finally:
            moto.stop()

        os.environ["SOFTHSM2_CONF"] = str(make_softhsm_token(root / "softhsm"))
        pin = root / "pin"
        pin.write_text(USER_PIN)
        pin.chmod(0o600)
        options = {
            "module": SOFTHSM_MODULE,
            "token_label": TOKEN_LABEL,
            "key_label": "latency",
            "pin_file": str(pin),
        }
        load_provider("pkcs11", settings(**options)).create_master_key()
        measure("pkcs11", lambda: load_provider("pkcs11", settings(**options)), n)


if __name__ == "__main__":
    main()
