"""JSON Schema regexes: ECMA-262 syntax and meaning, run by RE2 in linear time.

JSON Schema patterns are ECMA-262 regexes with the `u` flag; the vault runs them on RE2,
whose linear time keeps a hostile pattern from stalling validation. The two read some of
the same text differently: RE2's `\\s` is ASCII whitespace and its `.` stops only at
`\\n`, RE2 accepts `(?i)`, `(?P<n>...)`, `\\a`, `\\z` and `\\pL`, and it has no `\\cX`,
`\\u0041` or `\\p{Letter}`. So each pattern is read here as ECMA-262 (one pass, no
recursion) and written out in RE2 syntax with ECMA-262's meaning: `\\s` `\\S` `\\d` `\\D`
`\\w` `\\W` and `.` become explicit code point classes, escapes become `\\x{...}`, every
group becomes non-capturing. What RE2 cannot run (lookaround, backreferences, Unicode
properties it lacks, repetition counts over 1000) and what is not ECMA-262 at all are
refused with a `PatternError` naming the construct.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

__all__ = ["PatternError", "compile_pattern", "is_regex", "translate"]

_MAX = 0x10FFFF
_SYNTAX = frozenset("^$\\.*+?()[]{}|/")  # the identity escapes ECMA-262 allows with `u`
_CONTROL = {"f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B}
_HEX = frozenset("0123456789abcdefABCDEF")
_DIGITS = frozenset("0123456789")
_Ranges = tuple[tuple[int, int], ...]
_SPACE: _Ranges = (
    (0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF),
)  # fmt: skip
_DIGIT: _Ranges = ((0x30, 0x39),)
_WORD: _Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_LINE: _Ranges = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))  # what `.` does not match
# General_Category values, long (and the `digit`, `punct`, `cntrl` aliases) -> short.
_CATEGORIES = {
    "Other": "C", "Control": "Cc", "cntrl": "Cc", "Format": "Cf", "Private_Use": "Co",
    "Surrogate": "Cs", "Letter": "L", "Lowercase_Letter": "Ll", "Modifier_Letter": "Lm",
    "Other_Letter": "Lo", "Titlecase_Letter": "Lt", "Uppercase_Letter": "Lu", "Mark": "M",
    "Combining_Mark": "M", "Spacing_Mark": "Mc", "Enclosing_Mark": "Me",
    "Nonspacing_Mark": "Mn", "Number": "N", "Decimal_Number": "Nd", "digit": "Nd",
    "Letter_Number": "Nl", "Other_Number": "No", "Punctuation": "P", "punct": "P",
    "Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd", "Close_Punctuation": "Pe",
    "Final_Punctuation": "Pf", "Initial_Punctuation": "Pi", "Other_Punctuation": "Po",
    "Open_Punctuation": "Ps", "Symbol": "S", "Currency_Symbol": "Sc", "Modifier_Symbol": "Sk",
    "Math_Symbol": "Sm", "Other_Symbol": "So", "Separator": "Z", "Line_Separator": "Zl",
    "Paragraph_Separator": "Zp", "Space_Separator": "Zs",
}  # fmt: skip
_BINARY: dict[str, _Ranges] = {
    "Any": ((0, _MAX),),
    "ASCII": ((0, 0x7F),),
    "ASCII_Hex_Digit": ((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)),
}

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.never_capture = True  # a match is yes/no; group spans cost O(groups^2) memory


class PatternError(ValueError):
    """A pattern the vault will not run. `reason` names the construct, never the text
    around it; `ecma` says whether it is valid ECMA-262 that RE2 cannot run."""

    def __init__(self, reason: str, *, ecma: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.ecma = ecma


def _invalid(what: str) -> PatternError:
    return PatternError(f"is not an ECMA-262 regex ({what})", ecma=False)


def _unsupported(what: str) -> PatternError:
    return PatternError(f"uses {what}, which the vault's linear-time engine cannot run", ecma=True)


def _complement(ranges: _Ranges) -> _Ranges:
    out, low = [], 0
    for start, end in ranges:
        if start > low:
            out.append((low, start - 1))
        low = end + 1
    if low <= _MAX:
        out.append((low, _MAX))
    return tuple(out)


def _char(code: int) -> str:
    if code < 0x80 and (chr(code).isalnum() or code == 0x5F):
        return chr(code)
    return f"\\x{{{code:x}}}"


def _body(ranges: _Ranges) -> str:
    return "".join(_char(a) if a == b else f"{_char(a)}-{_char(b)}" for a, b in ranges)


def _set(ranges: _Ranges) -> tuple[str, str]:
    """(fragment inside a class, fragment outside one) for a set of code point ranges."""
    inside = _body(ranges)
    return inside, f"[{inside}]" if inside else "[^\\x{0}-\\x{10ffff}]"


_SETS = {
    "d": _set(_DIGIT), "D": _set(_complement(_DIGIT)),
    "s": _set(_SPACE), "S": _set(_complement(_SPACE)),
    "w": _set(_WORD), "W": _set(_complement(_WORD)),
}  # fmt: skip
_DOT = f"[^{_body(_LINE)}]"


def _property(name: str, negated: bool) -> tuple[str, str]:
    """`\\p{name}`: a General_Category, `Script=`, or one of the _BINARY properties."""
    key, _, value = name.partition("=")
    if value and key in ("General_Category", "gc"):
        name = value
    elif value and key in ("Script", "sc") and value.isidentifier():
        if value in _CATEGORIES.values() or value == "Any":
            raise _invalid(f"no script named '{value}'")
        token = f"\\{'P' if negated else 'p'}{{{value}}}"
        try:
            re2.compile(token, _OPTIONS)
        except re2.error:
            raise _unsupported(f"the script '{value}', unknown to RE2") from None
        return token, token
    elif value:
        raise _unsupported(f"the Unicode property '{key}'")
    if name in _BINARY:
        ranges = _BINARY[name]
        return _set(_complement(ranges) if negated else ranges)
    short = _CATEGORIES.get(name, name)
    if short not in _CATEGORIES.values():
        raise _unsupported(f"the Unicode property '{name}'")
    token = f"\\{'P' if negated else 'p'}{{{short}}}"
    return token, token


def _hex(p: str, i: int, count: int) -> tuple[int, int]:
    digits = p[i : i + count]
    if len(digits) != count or not set(digits) <= _HEX:
        raise _invalid("a malformed hexadecimal escape")
    return int(digits, 16), i + count


def _unicode(p: str, i: int) -> tuple[int, int]:
    """The code point of `\\u...` whose `u` is at p[i - 1], and the index after it."""
    if p[i : i + 1] == "{":
        end = p.find("}", i)
        digits = p[i + 1 : end] if end > 0 else ""
        if not digits or not set(digits) <= _HEX or int(digits, 16) > _MAX:
            raise _invalid("a malformed '\\u{...}' escape")
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
        raise _invalid("a trailing backslash")
    c, j = p[i + 1], i + 2
    if c in _SETS:
        return "set", _SETS[c], j
    if c in "pP":
        end = p.find("}", j)
        if p[j : j + 1] != "{" or end < 0:
            raise _invalid(f"'\\{c}' without a braced property name")
        return "set", _property(p[j + 1 : end], c == "P"), end + 1
    if c in _CONTROL:
        return "char", _CONTROL[c], j
    if c == "b" or c == "B":
        if in_class and c == "b":
            return "char", 0x08, j
        if in_class:
            raise _invalid("'\\B' in a character class")
        return "assert", "\\" + c, j
    if c == "c":
        if j < len(p) and p[j].isascii() and p[j].isalpha():
            return "char", ord(p[j]) % 32, j + 1
        raise _invalid("'\\c' not followed by a letter")
    if c == "0":
        if p[j : j + 1] in _DIGITS:
            raise _invalid("'\\0' followed by a digit")
        return "char", 0, j
    if c in _DIGITS:
        raise _invalid("a backreference in a class") if in_class else _unsupported(
            "a backreference '\\" + c + "'"
        )
    if c == "k" and not in_class:
        raise _unsupported("a named backreference '\\k<...>'")
    if c == "x":
        code, j = _hex(p, j, 2)
        return "char", code, j
    if c == "u":
        code, j = _unicode(p, j)
        return "char", code, j
    if c in _SYNTAX or (in_class and c == "-"):
        return "char", ord(c), j
    raise _invalid(f"the escape '\\{c}'")


def _class(p: str, i: int) -> tuple[str, int]:
    """Translate the class whose '[' is at p[i]; return RE2 text and the index after ']'."""
    i += 1
    negated = p[i : i + 1] == "^"
    i += negated
    parts: list[str] = []

    def atom(k: int) -> tuple[str, Any, int]:
        if k >= len(p):
            raise _invalid("an unclosed '['")
        if p[k] == "\\":
            return _escape(p, k, True)
        return "char", ord(p[k]), k + 1

    while True:
        if i >= len(p):
            raise _invalid("an unclosed '['")
        if p[i] == "]":
            break
        kind, value, i = atom(i)
        if p[i : i + 1] == "-" and p[i + 1 : i + 2] not in ("]", ""):
            high_kind, high, i = atom(i + 1)
            if kind != "char" or high_kind != "char":
                raise _invalid("a class escape as a range end")
            if value > high:
                raise _invalid("a character range out of order")
            parts.append(f"{_char(value)}-{_char(high)}")
        else:
            parts.append(_char(value) if kind == "char" else value[0])
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
        low, comma, high = p[i + 1 : end].partition(",") if end > 0 else ("", "", "")
        if not (low and set(low) <= _DIGITS and set(high) <= _DIGITS):
            return None
        if high and int(low) > int(high):
            raise _invalid("a repetition range out of order")
        if max(int(low), int(high or 0)) > 1000:
            raise _unsupported("a repetition count above 1000 (RE2's limit)")
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
        raise _unsupported(f"a lookahead '(?{head[0]}'")
    if head in ("<=", "<!"):
        raise _unsupported(f"a lookbehind '(?{head}'")
    if head[:1] == "<":
        end = p.find(">", i)
        name = p[i + 3 : end] if end > 0 else ""
        if not (name.isidentifier() or name.replace("$", "_").isidentifier()) or name in names:
            raise _invalid("a malformed or repeated group name")
        names.add(name)
        return end + 1
    if head[:1] in ("P", "#"):
        raise _invalid("Python's '(?P...)' group" if head[0] == "P" else "a comment '(?#...)'")
    j = i + 2
    while j < len(p) and (p[j].isalpha() or p[j] == "-"):
        j += 1
    if j > i + 2 and p[j : j + 1] == ":":
        raise _unsupported("a modifier group '(?flags:...)'")
    if j > i + 2:
        raise _invalid("inline flags '(?flags)'")
    raise _invalid("'(?' not followed by ':', '=', '!', '<=', '<!' or '<name>'")


def translate(pattern: str) -> str:
    """RE2 syntax for ECMA-262 `pattern` with its ECMA-262 meaning, or PatternError."""
    if any(0xD800 <= ord(c) <= 0xDFFF for c in pattern):
        raise _invalid("a lone surrogate")
    out: list[str] = []
    names: set[str] = set()
    depth, i = 0, 0
    last = "start"  # "atom" (may take a quantifier), "quantified", "assert" or "start"
    while i < len(pattern):
        c = pattern[i]
        if c in "*+?{":
            quantifier = _quantifier(pattern, i)
            if quantifier is None:
                raise _invalid("a lone '{'")
            if last != "atom":
                raise _invalid("a quantifier with nothing to repeat")
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
                raise _invalid("an unmatched ')'")
            text, depth, last = ")", depth - 1, "atom"
        elif c == "|":
            text, last = "|", "start"
        elif c in "^$":
            text, last = c, "assert"
        elif c == ".":
            text, last = _DOT, "atom"
        elif c == "[":
            text, i = _class(pattern, i)
            out.append(text)
            last = "atom"
            continue
        elif c == "\\":
            kind, value, i = _escape(pattern, i, False)
            out.append(_char(value) if kind == "char" else value[1] if kind == "set" else value)
            last = "assert" if kind == "assert" else "atom"
            continue
        elif c in "]}":
            raise _invalid(f"a lone '{c}'")
        else:
            text, last = _char(ord(c)), "atom"
        out.append(text)
        i += 1
    if depth:
        raise _invalid("an unclosed '('")
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> Any:
    """The RE2 program for an ECMA-262 pattern (PatternError if the vault cannot run it)."""
    return _compile(pattern)


def _compile(pattern: str) -> Any:
    translated = translate(pattern)
    try:
        return re2.compile(translated, _OPTIONS)
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
