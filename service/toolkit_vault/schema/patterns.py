"""JSON Schema regexes: ECMA-262 syntax and meaning, run by RE2 in linear time.

JSON Schema patterns are ECMA-262 regexes with the `u` flag; the vault runs them on RE2,
whose linear time keeps a hostile pattern from stalling validation. The two read some of
the same text differently: RE2 accepts `(?i)`, `(?P<n>...)`, `\\a`, `\\z` and `\\pL`, has
no `\\cX`, `\\u0041` or `\\p{Letter}`, and its `\\s` and `.` mean other sets (charsets.py).
So each pattern is read here as ECMA-262 (one pass, no recursion) and written out in RE2
syntax with ECMA-262's meaning: sets become explicit code point classes, escapes become
`\\x{...}`, every group becomes non-capturing. What RE2 cannot run (lookaround,
backreferences, Unicode properties it lacks, repetition counts over 1000) and what is not
ECMA-262 at all are refused with a `PatternError` naming the construct.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import re2

from toolkit_vault.schema.charsets import (
    DOT,
    MAX_CODE_POINT,
    RE2_OPTIONS,
    SETS,
    PatternError,
    char,
    invalid,
    property_set,
    unsupported,
)

__all__ = ["PatternError", "compile_pattern", "is_regex", "translate"]

MAX_PATTERN = 65_536  # characters; RE2 would refuse most longer programs anyway
_SYNTAX = frozenset("^$\\.*+?()[]{}|/")  # the identity escapes ECMA-262 allows with `u`
_CONTROL = {"f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B}
_HEX = frozenset("0123456789abcdefABCDEF")
_DIGITS = frozenset("0123456789")
_LITERALS = {code: char(code) for code in range(0x80)}  # non-ASCII stays as it is
_PLAIN = re.compile(r"[^\\^$.*+?()\[\]{}|]+")  # a run of literal pattern characters
_SURROGATE = re.compile("[\ud800-\udfff]")


def _hex(p: str, i: int, count: int) -> tuple[int, int]:
    digits = p[i : i + count]
    if len(digits) != count or not set(digits) <= _HEX:
        raise invalid("a malformed hexadecimal escape")
    return int(digits, 16), i + count


def _unicode(p: str, i: int) -> tuple[int, int]:
    """The code point of `\\u...` whose `u` is at p[i - 1], and the index after it."""
    if p[i : i + 1] == "{":
        end = p.find("}", i)
        digits = p[i + 1 : end] if end > 0 else ""
        if not digits or not set(digits) <= _HEX or int(digits, 16) > MAX_CODE_POINT:
            raise invalid("a malformed '\\u{...}' escape")
        return int(digits, 16), end + 1
    code, i = _hex(p, i, 4)
    if 0xD800 <= code <= 0xDBFF and p[i : i + 2] == "\\u":
        low, after = _hex(p, i + 2, 4)
        if 0xDC00 <= low <= 0xDFFF:
            return 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00), after
    return code, i


def _escape(p: str, i: int, in_class: bool) -> tuple[str, Any, int]:
    """Read the escape whose backslash is at p[i]: ("char", code point), ("set", the
    (inside, outside) fragments) or ("assert", RE2 text); and the index after it."""
    if i + 1 >= len(p):
        raise invalid("a trailing backslash")
    c, j = p[i + 1], i + 2
    if c in SETS:
        return "set", SETS[c], j
    if c in "pP":
        end = p.find("}", j)
        if p[j : j + 1] != "{" or end < 0:
            raise invalid(f"'\\{c}' without a braced property name")
        return "set", property_set(p[j + 1 : end], c == "P"), end + 1
    if c in _CONTROL:
        return "char", _CONTROL[c], j
    if c == "b" or c == "B":
        if in_class and c == "b":
            return "char", 0x08, j
        if in_class:
            raise invalid("'\\B' in a character class")
        return "assert", "\\" + c, j
    if c == "c":
        if j < len(p) and p[j].isascii() and p[j].isalpha():
            return "char", ord(p[j]) % 32, j + 1
        raise invalid("'\\c' not followed by a letter")
    if c == "0":
        if p[j : j + 1] in _DIGITS:
            raise invalid("'\\0' followed by a digit")
        return "char", 0, j
    if c in _DIGITS:
        raise (
            invalid("a backreference in a class")
            if in_class
            else unsupported("a backreference '\\" + c + "'")
        )
    if c == "k" and not in_class:
        raise unsupported("a named backreference '\\k<...>'")
    if c == "x":
        code, j = _hex(p, j, 2)
        return "char", code, j
    if c == "u":
        code, j = _unicode(p, j)
        return "char", code, j
    if c in _SYNTAX or (in_class and c == "-"):
        return "char", ord(c), j
    raise invalid(f"the escape '\\{c}'")


def _class(p: str, i: int) -> tuple[str, int]:
    """Translate the class whose '[' is at p[i]; return RE2 text and the index after ']'."""
    i += 1
    negated = p[i : i + 1] == "^"
    i += negated
    parts: list[str] = []

    def atom(k: int) -> tuple[str, Any, int]:
        if k >= len(p):
            raise invalid("an unclosed '['")
        if p[k] == "\\":
            return _escape(p, k, True)
        return "char", ord(p[k]), k + 1

    while True:
        if i >= len(p):
            raise invalid("an unclosed '['")
        if p[i] == "]":
            break
        kind, value, i = atom(i)
        if p[i : i + 1] == "-" and p[i + 1 : i + 2] not in ("]", ""):
            high_kind, high, i = atom(i + 1)
            if kind != "char" or high_kind != "char":
                raise invalid("a class escape as a range end")
            if value > high:
                raise invalid("a character range out of order")
            parts.append(f"{char(value)}-{char(high)}")
        else:
            parts.append(char(value) if kind == "char" else value[0])
    body = "".join(parts)
    if not body:  # [] matches nothing and [^] anything; RE2 has no empty class
        body, negated = "\\x{0}-\\x{10ffff}", not negated
    return f"[{'^' if negated else ''}{body}]", i + 1


def _quantifier(p: str, i: int) -> tuple[str, int] | None:
    """A quantifier starting at p[i] as RE2 text and the index after it, or None."""
    c = p[i]
    if c in "*+?":
        text, i = c, i + 1
    elif c == "{":
        end = p.find("}", i)
        low, _, high = p[i + 1 : end].partition(",") if end > 0 else ("", "", "")
        if not (low and set(low) <= _DIGITS and set(high) <= _DIGITS):
            return None
        if high and int(low) > int(high):
            raise invalid("a repetition range out of order")
        if max(int(low), int(high or 0)) > 1000:
            raise unsupported("a repetition count above 1000 (RE2's limit)")
        text, i = p[i : end + 1], end + 1
    else:
        return None
    if p[i : i + 1] == "?":
        return text + "?", i + 1
    return text, i


def _group(p: str, i: int, names: set[str]) -> int:
    """Check the group opening at p[i] == '('; return the index of its body."""
    if p[i + 1 : i + 2] != "?":
        return i + 1
    head = p[i + 2 : i + 4]
    if head[:1] == ":":
        return i + 3
    if head[:1] in ("=", "!"):
        raise unsupported(f"a lookahead '(?{head[0]}'")
    if head in ("<=", "<!"):
        raise unsupported(f"a lookbehind '(?{head}'")
    if head[:1] == "<":
        end = p.find(">", i)
        name = p[i + 3 : end] if end > 0 else ""
        if not (name.isidentifier() or name.replace("$", "_").isidentifier()) or name in names:
            raise invalid("a malformed or repeated group name")
        names.add(name)
        return end + 1
    if head[:1] in ("P", "#"):
        raise invalid("Python's '(?P...)' group" if head[0] == "P" else "a comment '(?#...)'")
    j = i + 2
    while j < len(p) and (p[j].isalpha() or p[j] == "-"):
        j += 1
    if j > i + 2 and p[j : j + 1] == ":":
        raise unsupported("a modifier group '(?flags:...)'")
    if j > i + 2:
        raise invalid("inline flags '(?flags)'")
    raise invalid("'(?' not followed by ':', '=', '!', '<=', '<!' or '<name>'")


def translate(pattern: str) -> str:
    """RE2 syntax for ECMA-262 `pattern` with its ECMA-262 meaning, or PatternError."""
    if _SURROGATE.search(pattern):
        raise invalid("a lone surrogate")
    out: list[str] = []
    names: set[str] = set()
    depth, i = 0, 0
    last = "start"  # "atom" (may take a quantifier), "quantified", "assert" or "start"
    while i < len(pattern):
        if plain := _PLAIN.match(pattern, i):
            out.append(plain[0].translate(_LITERALS))
            i, last = plain.end(), "atom"
            continue
        c = pattern[i]
        if c in "*+?{":
            quantifier = _quantifier(pattern, i)
            if quantifier is None:
                raise invalid("a lone '{'")
            if last != "atom":
                raise invalid("a quantifier with nothing to repeat")
            text, i = quantifier
            out.append(text)
            last = "quantified"
            continue
        if c == "(":
            i = _group(pattern, i, names)
            out.append("(?:")
            depth, last = depth + 1, "start"
            continue
        if c == ")":
            if depth == 0:
                raise invalid("an unmatched ')'")
            text, depth, last = ")", depth - 1, "atom"
        elif c == "|":
            text, last = "|", "start"
        elif c in "^$":
            text, last = c, "assert"
        elif c == ".":
            text, last = DOT, "atom"
        elif c == "[":
            text, i = _class(pattern, i)
            out.append(text)
            last = "atom"
            continue
        elif c == "\\":
            kind, value, i = _escape(pattern, i, False)
            out.append(char(value) if kind == "char" else value[1] if kind == "set" else value)
            last = "assert" if kind == "assert" else "atom"
            continue
        elif c in "]}":
            raise invalid(f"a lone '{c}'")
        else:
            text, last = char(ord(c)), "atom"
        out.append(text)
        i += 1
    if depth:
        raise invalid("an unclosed '('")
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> Any:
    """The RE2 program for an ECMA-262 pattern (PatternError if the vault cannot run it)."""
    return _compile(pattern)


def _compile(pattern: str) -> Any:
    if len(pattern) > MAX_PATTERN:
        raise PatternError(
            f"is longer than {MAX_PATTERN} characters, too large for the vault's regex engine",
            ecma=True,
        )
    translated = translate(pattern)
    if "\\B" in translated:
        # RE2 searches byte by byte, and its `\B` holds between two bytes of one UTF-8
        # character: starting each match at a character keeps ECMA-262's meaning.
        translated = f"\\A(?s:.)*?(?:{translated})"
    try:
        return re2.compile(translated, RE2_OPTIONS)
    except re2.error:
        raise PatternError("is too large for the vault's regex engine", ecma=True) from None


def is_regex(instance: object) -> bool:
    """`format: regex`: an ECMA-262 regex the vault itself could run. Not cached: these
    strings come from configs."""
    if not isinstance(instance, str):
        return True
    try:
        _compile(instance)
    except PatternError:
        return False
    return True
