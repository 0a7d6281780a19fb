"""Write ``docs/numpy-coverage.md``: every public function of numpy, numpy.linalg, numpy.fft
and scipy.special, and what asd does with it on traced arrays.

Usage: ``python docs/make_numpy_coverage.py [OUTPUT]`` (default: ``docs/numpy-coverage.md``
next to this script). The status comes from asd's own dispatch tables (what a traced array
actually routes to), so a new registration shows up here without editing this file; only the
*reasons* for refusing a function are sorted by hand, in `REASONS`, and a function in no
reason list is "not yet": the list of work left. ``tests/test_numpy_coverage.py`` checks the
committed file is current.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import asd.library.special as _special  # the scipy.special rules (loaded lazily otherwise)
import asd.library.structure as _structure
import numpy as np

import asd  # noqa: F401  (registers the library's rules in the dispatch tables)
from asd.core.primitive import ALTERNATIVES, FUNCTIONS, UFUNCS, qualified_name
from asd.core.tracing import METADATA

MODULES = ("numpy", "numpy.linalg", "numpy.fft", "scipy.special")

# Registered, but locally constant with jumps: derivative 0 away from a jump, NotLipschitzError
# at a jump that reaches the output (asd.stop_gradient makes them constants).
DISCONTINUOUS = {
    "equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "sign", "floor",
    "ceil", "round", "around", "rint", "trunc", "fix", "heaviside", "remainder", "mod",
    "fmod", "floor_divide", "divmod", "modf", "angle", "logical_and", "logical_or",
    "logical_xor", "logical_not", "isclose", "allclose",
}
# Logical on booleans (numpy's & | ^ ~ on comparisons), bits on integers; floats refused.
BOOLEAN_ONLY = {"bitwise_and", "bitwise_or", "bitwise_xor", "invert", "bitwise_not",
                "bitwise_invert"}

# Refused by design, with the reason (the same table the refusals raise from), and the
# conversions to plain arrays, which raise TracerBoolError (numpy does not dispatch them).
REASONS = {**_structure.REFUSED, "converts": (
    "converts to a plain numpy array, which would drop the value from the program (numpy does "
    "not dispatch it to asd): raises `TracerBoolError` naming the spelling that works, "
    "`asd.numpy.array` (or the traced array itself, `x.copy()`)", {
        "array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray",
        "asarray_chkfinite", "require",
    })}


def functions(module_name: str) -> list[tuple[str, object]]:
    """The public functions of a module (classes, constants and submodules left out)."""
    module = importlib.import_module(module_name)
    out = []
    for name in sorted(n for n in dir(module) if not n.startswith("_")):
        obj = getattr(module, name)
        if callable(obj) and not isinstance(obj, type):
            out.append((name, obj))
    return out


def status(name: str, fn) -> tuple[str, str]:
    """(status, note) of one function on traced arrays."""
    registered = (fn in UFUNCS) if isinstance(fn, np.ufunc) else _hashable_in(fn, FUNCTIONS)
    table = UFUNCS if isinstance(fn, np.ufunc) else FUNCTIONS
    refused = getattr(table.get(fn), "refused", None) if registered else None
    if refused is not None:
        return f"refused ({refused[0]})", refused[1]
    if registered and name in BOOLEAN_ONLY:
        return ("discontinuous", "on booleans (comparisons and their combinations), which "
                "jump where the comparisons do, and integers (numpy's bits: Python's `~` of "
                "a comparison of Python floats); floats are refused: compare first")
    if registered:
        return ("discontinuous", "value computed; locally constant away from its jumps") \
            if name in DISCONTINUOUS else ("supported", "")
    if _hashable_in(fn, METADATA):
        return "supported", "reads shape or dtype only"
    for key, (reason, names) in REASONS.items():
        if name in names:
            return f"refused ({key})", reason
    if isinstance(fn, np.ufunc) and not any("d" in t.split("->")[1] for t in fn.types):
        return "refused (discrete)", "no floating-point loop: integer, boolean or complex only"
    instead = ALTERNATIVES.get(qualified_name(fn))
    return "not yet", f"no rule yet; use {instead}" if instead else "no rule yet"


def status_in(module: str, name: str, fn) -> tuple[str, str]:
    """`status`, and scipy.special's non-ufunc functions that asd.scipy.special provides."""
    if (module == "scipy.special" and not isinstance(fn, np.ufunc)
            and name in _special.__all__):
        return "supported", (f"as `asd.scipy.special.{name}` (scipy's own converts its "
                             "arguments to plain arrays)")
    if module == "scipy.special" and name in _PARTLY:
        return status(name, fn)[0], _PARTLY[name]
    return status(name, fn)


# supported in some arguments only: the others raise UnsupportedError when traced
_PARTLY = {
    "gammainc": "in x; a traced a is refused (no closed-form derivative in a)",
    "gammaincc": "in x; a traced a is refused (no closed-form derivative in a)",
    "betainc": "in x; a traced a or b is refused (no closed-form derivative in them)",
    "betaincc": "in x; a traced a or b is refused (no closed-form derivative in them)",
    "stdtr": "in t; a traced df is refused (no closed-form derivative in df)",
}


def _hashable_in(fn, table) -> bool:
    try:
        return fn in table
    except TypeError:
        return False


def render() -> str:
    import scipy

    lines = ["# numpy and scipy coverage", "",
             f"numpy {np.__version__}, scipy {scipy.__version__}, Python "
             f"{sys.version_info.major}.{sys.version_info.minor}", "",
             "Generated by `python docs/make_numpy_coverage.py` from asd's dispatch tables: "
             "what each public function does when it meets a traced array inside "
             "`asd.subgrad` and friends. **supported**: a rule (correct at its kinks); "
             "**discontinuous**: its value is computed and it is locally constant away from "
             "its jumps, and a jump that reaches the output raises `NotLipschitzError`; "
             "**refused**: raises `asd.UnsupportedError` (`TracerBoolError` for the "
             "conversions to plain arrays; a constant never sees a traced value), for the "
             "reason given; **not yet**: refused because no rule has been written yet, with "
             "the registration snippet in the error message.", "",
             "The statuses hold for traced *arrays* as arguments. A Python list of traced "
             "values (`np.mean([x, y])`, `np.linalg.norm([x, y])`) is a call form numpy never "
             "hands to asd: `__array_function__` dispatch looks only at the arguments "
             "themselves, so numpy converts the list with `np.asarray` inside its own code, "
             "which would drop the values from the program. asd refuses it there with "
             "`TracerBoolError`, naming the numpy function, the user's line and the spelling "
             "that works (`np.mean(asd.numpy.array([x, y]))`). Making the list form itself "
             "work would take patching numpy's private dispatchers for the whole process; "
             "asd does not.", ""]
    rows: dict[str, list[tuple[str, str, str]]] = {}
    for module in MODULES:
        rows[module] = [(name, *status_in(module, name, fn))
                        for name, fn in functions(module)]
    lines += ["| module | functions | supported | discontinuous | refused | not yet |",
              "|---|---|---|---|---|---|"]
    for module, entries in rows.items():
        count = {s: sum(1 for _, st, _ in entries if st.split()[0] == s)
                 for s in ("supported", "discontinuous", "refused", "not")}
        lines.append(f"| `{module}` | {len(entries)} | {count['supported']} | "
                     f"{count['discontinuous']} | {count['refused']} | {count['not']} |")
    for module, entries in rows.items():
        lines += ["", f"## `{module}`", "", "| function | status | note |", "|---|---|---|"]
        lines += [f"| `{name}` | {st} | {note} |" for name, st, note in entries]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).with_name("numpy-coverage.md")
    out.write_text(render(), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv)
