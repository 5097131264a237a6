"""Byte sizes and durations as users write them, parsed as the CLI does
(common/units.cc ParseByteSize; absl::ParseDuration for --time-limit)."""

import datetime
import re
from typing import Union

from trainctl.errors import InvalidArgument

_ACCEPTED = ('expected a whole number of bytes or a number with a unit K, M, G, T or P '
             '(optionally followed by "iB" or "B"; powers of 1024), e.g. "1024", '
             '"512MiB", "10GiB", "1.5TiB", "80G"')
_EXPONENT = {"k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_SIZE_RE = re.compile(r"^(\d*)(?:\.(\d*))?\s*([A-Za-z]*)$")
_INT64_MAX = 2**63 - 1


def parse_byte_size(size: Union[int, str]) -> int:
    """Returns a byte count.

    ``size`` is an int (bytes) or a string: "1024", "512MiB", "10GiB",
    "1.5TiB", "80G" (K/M/G/T/P, with or without "iB"/"B", are powers of 1024,
    as nvidia-smi and Slurm's --mem mean them; case-insensitive). A fraction
    of a unit is rounded down to whole bytes.

    Raises InvalidArgument (a ValueError) for an empty, negative, malformed or
    overflowing size; TypeError for another type.
    """
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise TypeError("byte size: expected an int (bytes) or a str such as "
                        "'20GiB', got %s" % type(size).__name__)
    if isinstance(size, int):
        if size < 0 or size > _INT64_MAX:
            raise InvalidArgument("invalid byte size %d: it must be 0 to 2**63-1" % size)
        return size

    def bad(why):
        return InvalidArgument('invalid byte size "%s": %s; %s' % (size, why, _ACCEPTED))

    s = size.strip()
    if not s:
        raise bad("it is empty")
    if s[0] == "-":
        raise bad("it is negative")
    m = _SIZE_RE.match(s)
    if not m:
        raise bad("it does not start with a number" if not s[0].isdigit()
                  else 'unknown unit "%s"' % s.lstrip("0123456789."))
    whole, frac, unit = m.group(1), m.group(2), m.group(3)
    if not whole:
        raise bad("it does not start with a number")
    if frac is not None and not frac:
        raise bad("no digits after '.'")
    lower = unit.lower()
    if lower in ("", "b"):
        exponent = 0
    elif lower[0] in _EXPONENT and lower[1:] in ("", "b", "ib"):
        exponent = _EXPONENT[lower[0]]
    else:
        raise bad('unknown unit "%s"' % unit)
    multiplier = 1024 ** exponent
    frac = (frac or "")[:18]
    if exponent == 0 and frac.strip("0"):
        raise bad("it is not a whole number of bytes")
    value = int(whole) * multiplier
    if frac:
        value += int(frac) * multiplier // (10 ** len(frac))
    if value > _INT64_MAX:
        raise bad("it does not fit in 64 bits")
    return value


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_s(value: Union[int, float, str, datetime.timedelta], what: str) -> float:
    """Returns seconds from a number of seconds, a ``datetime.timedelta`` or a
    string with units as Go and Abseil write durations ("90s", "30m",
    "1h30m", "250ms"). Raises InvalidArgument naming ``what`` for a negative
    or malformed value, TypeError for another type."""
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise TypeError("%s: expected seconds, a timedelta or a str such as '30m'" % what)
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        pos, seconds = 0, 0.0
        for m in _DURATION_PART.finditer(text):
            if m.start() != pos:
                break
            seconds += float(m.group(1)) * _UNIT_S[m.group(2)]
            pos = m.end()
        if pos != len(text) or not text:
            raise InvalidArgument(
                "%s %r: expected a duration with a unit, such as 30m, 2h or 1h30m" % (what, value))
    else:
        raise TypeError("%s: expected seconds, a timedelta or a str such as '30m', got %s"
                        % (what, type(value).__name__))
    if seconds != seconds or seconds < 0:
        raise InvalidArgument("%s %r: must be a non-negative duration" % (what, value))
    return seconds
