"""Untrusted text (names, scopes, reasons, events' words) as a terminal may be shown it.

Its own module, not the import report's, so a listing escapes what it prints without
importing the report's classes (issue 53)."""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: str) -> str:
    """Names and scopes are untrusted source text: escape what a terminal would act on."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
