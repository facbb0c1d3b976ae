"""Fixtures loading the example MCP descriptions in tests/vectors/package."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from package_builders import VECTORS


@pytest.fixture
def vector() -> Callable[[str], bytes]:
    def load(name: str) -> bytes:
        return (VECTORS / name).read_bytes()

    return load


@pytest.fixture
def vector_json() -> Callable[[str], Any]:
    def load(name: str) -> Any:
        return json.loads((VECTORS / name).read_bytes())

    return load
