"""ECMA-262's character sets as RE2 classes: `\\s` `\\d` `\\w` and negations, `.`, `\\p{...}`.

RE2 reads `\\s` as ASCII whitespace and `.` as anything but `\\n`; ECMA-262 (with the `u`
flag JSON Schema asks for) means Unicode's White_Space plus the line terminators, and
anything but `\\n`, `\\r`, U+2028 and U+2029. So each becomes an explicit class of code
point ranges, and `\\p{...}` maps ECMA-262's property names onto the ones RE2 knows.
"""

from __future__ import annotations

import re2

__all__ = [
    "DOT",
    "MAX_CODE_POINT",
    "RE2_OPTIONS",
    "SETS",
    "PatternError",
    "char",
    "invalid",
    "property_set",
    "unsupported",
]

MAX_CODE_POINT = 0x10FFFF
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
    "Any": ((0, MAX_CODE_POINT),),
    "ASCII": ((0, 0x7F),),
    "ASCII_Hex_Digit": ((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)),
}

RE2_OPTIONS = re2.Options()
RE2_OPTIONS.log_errors = False
RE2_OPTIONS.never_capture = True  # a match is yes/no; group spans cost O(groups^2) memory


class PatternError(ValueError):
    """A pattern the vault will not run. `reason` names the construct, never the text
    around it; `ecma` says whether it is valid ECMA-262 that RE2 cannot run."""

    def __init__(self, reason: str, *, ecma: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.ecma = ecma


def invalid(what: str) -> PatternError:
    return PatternError(f"is not an ECMA-262 regex ({what})", ecma=False)


def unsupported(what: str) -> PatternError:
    return PatternError(f"uses {what}, which the vault's linear-time engine cannot run", ecma=True)


def _complement(ranges: _Ranges) -> _Ranges:
    out, low = [], 0
    for start, end in ranges:
        if start > low:
            out.append((low, start - 1))
        low = end + 1
    if low <= MAX_CODE_POINT:
        out.append((low, MAX_CODE_POINT))
    return tuple(out)


def char(code: int) -> str:
    if code < 0x80 and (chr(code).isalnum() or code == 0x5F):
        return chr(code)
    return f"\\x{{{code:x}}}"


def _body(ranges: _Ranges) -> str:
    return "".join(char(a) if a == b else f"{char(a)}-{char(b)}" for a, b in ranges)


def _set(ranges: _Ranges) -> tuple[str, str]:
    """(fragment inside a class, fragment outside one) for a set of code point ranges."""
    inside = _body(ranges)
    return inside, f"[{inside}]" if inside else "[^\\x{0}-\\x{10ffff}]"


SETS = {
    "d": _set(_DIGIT), "D": _set(_complement(_DIGIT)),
    "s": _set(_SPACE), "S": _set(_complement(_SPACE)),
    "w": _set(_WORD), "W": _set(_complement(_WORD)),
}  # fmt: skip
DOT = f"[^{_body(_LINE)}]"


def property_set(name: str, negated: bool) -> tuple[str, str]:
    """`\\p{name}`: a General_Category, `Script=`, or one of the _BINARY properties."""
    key, _, value = name.partition("=")
    if value and key in ("General_Category", "gc"):
        name = value
    elif value and key in ("Script", "sc") and value.isidentifier():
        if value in _CATEGORIES.values() or value == "Any":
            raise invalid(f"no script named {value!r}")
        token = f"\\{'P' if negated else 'p'}{{{value}}}"
        try:
            re2.compile(token, RE2_OPTIONS)
        except re2.error:
            raise unsupported(f"the script {value!r}, unknown to RE2") from None
        return token, token
    elif value:
        raise unsupported(f"the Unicode property {key!r}")
    if name in _BINARY:
        ranges = _BINARY[name]
        return _set(_complement(ranges) if negated else ranges)
    short = _CATEGORIES.get(name, name)
    if short not in _CATEGORIES.values():
        raise unsupported(f"the Unicode property {name!r}")
    token = f"\\{'P' if negated else 'p'}{{{short}}}"
    return token, token
