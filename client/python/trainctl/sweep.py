"""Hyper-parameter sweeps: expanding grid and random parameters into trials,
as ``trainctl sweep`` does (client/sweep.h). Pure: no RPC, no clock, no
global random state (trials depend only on the inputs and the seed).

A sweep is the cartesian product of the grid parameters (the first varies
slowest) and, for each grid point, ``samples`` draws of the random
parameters. Every ``{name}`` in the command is replaced by the trial's value;
``{{`` and ``}}`` are literal braces. Random values are drawn with Python's
``random.Random(seed)``: the same seed gives the same trials from this
module, though not the same values as the C++ CLI draws.
"""

import math
import random
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from trainctl.errors import InvalidArgument

MAX_TRIALS = 10_000
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SWEEP_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_FORMS = "uniform:LOW:HIGH, loguniform:LOW:HIGH, int:LOW:HIGH or choice:A|B|..."


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or len(name) > 64 or not _IDENT.match(name):
        raise InvalidArgument('%s: "%s" is not a parameter name ([A-Za-z_][A-Za-z0-9_]*, '
                              "at most 64 bytes)" % (what, name))
    return name


def check_sweep_id(sweep_id: str) -> str:
    """Raises InvalidArgument unless ``sweep_id`` is 1 to 64 characters of
    [A-Za-z0-9._-] (what the coordinator accepts)."""
    if not isinstance(sweep_id, str) or not _SWEEP_ID.match(sweep_id):
        raise InvalidArgument("sweep_id=%r: expected 1 to 64 characters of [A-Za-z0-9._-]"
                              % (sweep_id,))
    return sweep_id


class Distribution:
    """How a random parameter is drawn: kind "uniform", "loguniform", "int"
    (both ends included) or "choice"."""

    def __init__(self, kind: str, low: float = 0.0, high: float = 0.0,
                 choices: Sequence[str] = ()):
        self.kind, self.low, self.high, self.choices = kind, low, high, list(choices)

    def sample(self, rng: random.Random) -> str:
        if self.kind == "uniform":
            return "%g" % rng.uniform(self.low, self.high)
        if self.kind == "loguniform":
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
            return "%g" % min(max(x, self.low), self.high)
        if self.kind == "int":
            return str(rng.randint(int(self.low), int(self.high)))
        return self.choices[rng.randrange(len(self.choices))]


def parse_distribution(spec: Union[str, Sequence[Any]], name: str = "") -> Distribution:
    """Parses a distribution as the CLI's --param takes it: "uniform:0:1",
    "loguniform:1e-5:1e-2", "int:1:8", "choice:adam|sgd"; or a list/tuple of
    values, meaning a choice among them.

    Raises InvalidArgument saying which form was expected.
    """
    what = "params[%r]" % name if name else "distribution"
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise InvalidArgument("%s: empty choice list" % what)
        return Distribution("choice", choices=[str(v) for v in spec])
    if not isinstance(spec, str):
        raise TypeError("%s: expected a str such as 'loguniform:1e-5:1e-2' or a list of "
                        "choices, got %s" % (what, type(spec).__name__))
    kind, sep, rest = spec.partition(":")
    if not sep:
        raise InvalidArgument('%s "%s": expected %s' % (what, spec, _FORMS))
    if kind == "choice":
        choices = rest.split("|")
        if any(not c for c in choices):
            raise InvalidArgument('%s "%s": empty choice; expected choice:A|B|... with no '
                                  "empty value" % (what, spec))
        return Distribution("choice", choices=choices)
    if kind not in ("uniform", "loguniform", "int"):
        raise InvalidArgument('%s "%s": unknown distribution "%s"; expected %s'
                              % (what, spec, kind, _FORMS))
    bounds = rest.split(":")
    try:
        low, high = (float(b) for b in bounds) if len(bounds) == 2 else (None, None)
    except ValueError:
        low = high = None
    if low is None or not (math.isfinite(low) and math.isfinite(high)):
        raise InvalidArgument('%s "%s": expected %s:LOW:HIGH with LOW and HIGH finite '
                              "numbers" % (what, spec, kind))
    if low > high:
        raise InvalidArgument('%s "%s": LOW %g is above HIGH %g' % (what, spec, low, high))
    if kind == "loguniform" and low <= 0:
        raise InvalidArgument('%s "%s": loguniform needs 0 < LOW <= HIGH, got LOW %g'
                              % (what, spec, low))
    if kind == "int" and not all(re.match(r"^[+-]?\d+$", b.strip()) for b in bounds):
        raise InvalidArgument('%s "%s": int:LOW:HIGH takes integers, e.g. int:1:8'
                              % (what, spec))
    return Distribution(kind, low, high)


def _scan(arg: str, names: Optional[set] = None):
    """Yields ("text", s) and ("param", name) pieces of a command argument;
    "{{" and "}}" are literal braces, a "{" not starting "{identifier}" is
    kept as is."""
    i, n = 0, len(arg)
    while i < n:
        c = arg[i]
        if c in "{}" and i + 1 < n and arg[i + 1] == c:
            yield "text", c
            i += 2
            continue
        if c == "{":
            close = arg.find("}", i + 1)
            if close >= 0:
                name = arg[i + 1:close]
                if len(name) <= 64 and _IDENT.match(name):
                    yield "param", name
                    i = close + 1
                    continue
        yield "text", c
        i += 1


def expand(command: Sequence[str], grid: Optional[Mapping[str, Sequence[Any]]] = None,
           params: Optional[Mapping[str, Any]] = None, samples: int = 0,
           seed: int = 0) -> List[Tuple[Dict[str, str], List[str]]]:
    """Expands a sweep into its trials, grid order first, then samples: a list
    of (params name -> value, argv).

    ``grid`` maps a name to the values to try (each turned into str as
    given: pass "1e-3" to keep that spelling); ``params`` maps a name to a
    distribution (parse_distribution); ``samples`` draws per grid point.
    Raises InvalidArgument when there is no parameter, a name is given twice
    or is not an identifier, a grid parameter has no value, a {placeholder}
    names no parameter, random parameters come without ``samples`` (or
    ``samples`` without them), or there would be more than MAX_TRIALS trials.
    """
    grid = dict(grid or {})
    params = dict(params or {})
    if not grid and not params:
        raise InvalidArgument("sweep(): no parameters: give grid={'lr': [...]} and/or "
                              "params={'lr': 'loguniform:1e-5:1e-2'} with samples=N")
    for name in set(grid) & set(params):
        raise InvalidArgument("sweep(): parameter %s is given twice (grid and params)" % name)
    if params and samples <= 0:
        raise InvalidArgument("sweep(): params %s need samples=N (draws per grid point)"
                              % ", ".join(sorted(params)))
    if not params and samples:
        raise InvalidArgument("sweep(): samples=%d needs at least one random parameter in "
                              "params" % samples)
    grid_values: List[Tuple[str, List[str]]] = []
    for name, values in grid.items():
        _check_name(name, "grid")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise TypeError("grid[%r]: expected a list of values, got %s"
                            % (name, type(values).__name__))
        strs = [str(v) for v in values]
        if not strs or any(not s for s in strs):
            raise InvalidArgument("grid[%r]: give at least one value and no empty value" % name)
        grid_values.append((name, strs))
    dists = [(_check_name(n, "params"), parse_distribution(d, n)) for n, d in params.items()]
    names = set(grid) | set(params)
    for arg in command:
        for kind, piece in _scan(arg):
            if kind == "param" and piece not in names:
                raise InvalidArgument(
                    'command argument "%s": placeholder {%s} is not a parameter '
                    "(parameters: %s); write {{ and }} for literal braces"
                    % (arg, piece, ", ".join(sorted(names))))
    points = 1
    for _, values in grid_values:
        points *= len(values)
    per_point = samples if params else 1
    if points * per_point > MAX_TRIALS:
        raise InvalidArgument("sweep(): more than %d trials (%d grid point(s) x %d "
                              "sample(s)); use fewer values or fewer samples"
                              % (MAX_TRIALS, points, per_point))
    rng = random.Random(seed)
    trials = []
    index = [0] * len(grid_values)
    for _ in range(points):
        base = {name: values[index[g]] for g, (name, values) in enumerate(grid_values)}
        for _ in range(per_point):
            trial = dict(base)
            for name, dist in dists:
                trial[name] = dist.sample(rng)
            argv = ["".join(trial[p] if kind == "param" else p for kind, p in _scan(arg))
                    for arg in command]
            trials.append((trial, argv))
        for g in range(len(grid_values) - 1, -1, -1):  # odometer, last fastest
            index[g] += 1
            if index[g] < len(grid_values[g][1]):
                break
            index[g] = 0
    return trials
