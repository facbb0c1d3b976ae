"""`moto_server`, with the RSA key moto makes for every KMS key made when it is first used.

moto gives each new KMS key, symmetric ones too, a 2048-bit RSA key for Sign and Verify
(`moto.kms.models.Key.__init__`): 30 to 100 ms of the server's CPU per CreateKey, and every
aws-kms vault of the suite creates one. The vault's keys are symmetric and never sign, so
here the RSA key is made at its first use: the same key and the same answers, made later.
Run as moto's own script is (`python moto_server_lazy.py -H 127.0.0.1 -p PORT`).
"""

from __future__ import annotations

import sys
from typing import Any

from moto.kms import models, utils


class _LazyKey:
    def __init__(self, key_spec: str) -> None:
        self._key_spec = key_spec
        self._key: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._key is None:
            self._key = utils.generate_private_key(self._key_spec)
        return getattr(self._key, name)


def _generate_private_key(key_spec: str) -> Any:
    return _LazyKey(key_spec)


models.generate_private_key = _generate_private_key  # type: ignore[assignment]

if __name__ == "__main__":
    from moto.server import main

    sys.exit(main())
