"""A database URL as it may be shown: its password hidden (`init` prints where it stores)."""

from __future__ import annotations

from sqlalchemy.engine import make_url

__all__ = ["shown_url"]


def shown_url(url: str) -> str:
    """`url` with its password, if any, replaced by `***`."""
    return make_url(url).render_as_string(hide_password=True)
