"""A notebook's parameters as papermill reads them, and the values given for them checked before anything runs.

- ``declared(notebook)``: each parameter's declared type and default (its ``parameters`` cell);
- ``from_cli``: a ``-p NAME VALUE`` typed as the notebook declares it: a ``str`` parameter takes the text as typed
  (a YAML-quoted text is unquoted), any other is parsed as YAML;
- ``check_values``: each value against its declared type (a value YAML turned into another type, such as ``Yes``
  into a boolean, is refused with a hint to quote it) and each number against its range (``RANGES``).
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

from .. import paths
from ..stats import N_BOOT_MIN
from ..checks import int_words, is_int, is_number, number_words
from ..score_settings import INTEGER_SETTINGS, OPTIONAL_INTEGERS


def integer(lo: int, hi: int | None = None, none: bool = False):
    """A check that a value is an integer (``checks.is_int``: not a bool) from ``lo`` (to ``hi``; or None when
    ``none``); ``.allowed`` says so in words (``checks.int_words``)."""
    def ok(v) -> bool:
        return none if v is None else is_int(v, lo, hi)
    ok.allowed = int_words(lo, hi) + (" or null" if none else "")
    return ok


def _closed(lo: float, hi: float):
    """A check that a value is a number from ``lo`` to ``hi`` (``checks.is_number``), said by ``checks.number_words``."""
    def ok(v) -> bool:
        return is_number(v, lo, hi)
    ok.allowed = number_words(lo, hi)
    return ok


# every numeric parameter of the shipped notebooks, by name, but an analysis's: checked before the sweep or `run`
# starts any notebook (the functions the notebooks call check them again, for a run in JupyterLab); the scoring
# settings' ranges are those of ``score_settings.INTEGER_SETTINGS``. An analysis notebook's parameters are checked as
# its parameter record (``nbutils.analysis``: the sweep and `run` pass it to ``check_parameters``); ``n_boot``
# is here too for the notebooks that bootstrap outside an analysis (the quickstart, the power study)
RANGES = {
    "n_boot": integer(N_BOOT_MIN), "seed": integer(0),
    "prompts_per_concept": integer(1), "n_examples": integer(1), "warn_tokens": integer(1),
    "n_questions": integer(1), "logic_share": _closed(0, 1), "n_null_personas": integer(1), "max_roots": integer(1, none=True),
    **{name: integer(lo, none=name in OPTIONAL_INTEGERS) for name, lo in INTEGER_SETTINGS.items()},
}

_TYPES = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "list": (list,), "dict": (dict,)}


def _allowed(type_name: str | None) -> tuple | None:
    """The Python types a declared annotation allows: a plain name, ``Union[a, b]`` or ``Optional[a]`` (None is then
    allowed too); None for an annotation this check does not know (such a value is checked against its default)."""
    name = (type_name or "").replace(" ", "")
    optional = name.startswith("Optional[") and name.endswith("]")
    if optional or (name.startswith("Union[") and name.endswith("]")):
        parts = name[name.index("[") + 1:-1].split(",")
    else:
        return _TYPES.get(name)  # papermill names an unannotated parameter "None": unknown here
    kinds = [type(None) if part == "None" else _TYPES.get(part) for part in parts]
    if any(k is None for k in kinds):
        return None
    flat = tuple(t for k in kinds for t in (k if isinstance(k, tuple) else (k,)))
    return flat + ((type(None),) if optional else ())


@functools.lru_cache(maxsize=64)
def _inspect(path: str, mtime: float) -> dict[str, tuple[str, object]]:
    import papermill as pm

    out = {}
    try:
        found = pm.inspect_notebook(path)
    except Exception as err:  # noqa: BLE001 - nbformat raises several kinds for a file that is not a notebook
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:100]
        raise ValueError(f"notebook: {path} cannot be read as a notebook ({first}); give a whole .ipynb file (a "
                         "notebook of the suite, or git checkout -- <file> to restore one)") from None
    for name, p in found.items():
        try:
            default = ast.literal_eval(p.get("default") or "None")
        except (ValueError, SyntaxError):
            default = None
        out[name] = (p.get("inferred_type_name") or "None", default)
    return out


def declared(notebook: str | Path) -> dict[str, tuple[str, object]]:
    """Each parameter of the notebook's ``parameters`` cell: (declared type name, or "None" when unannotated; default)."""
    p = paths.resolve(notebook)
    return _inspect(str(p), p.stat().st_mtime)


def _quoted(text: str) -> bool:
    t = text.strip()
    return len(t) >= 2 and t[0] == t[-1] and t[0] in "'\""


def from_cli(text: str, name: str, type_name: str | None):
    """A ``-p`` value: the text as typed for a ``str`` parameter (unquoted when it is a quoted YAML string), else YAML
    (numbers, booleans, null, lists, mappings), else the text; a mapping that gives a key twice is an error."""
    from ..artifacts import DuplicateKeyError, read_yaml

    if type_name == "str" and not _quoted(text):
        return text
    try:
        return read_yaml(text, f"-p {name}")
    except DuplicateKeyError:
        raise
    except ValueError:
        return text


def _kind(v) -> str:
    return {bool: "a boolean", type(None): "null", dict: "a mapping", list: "a list"}.get(type(v), type(v).__name__)


def _hint(name: str, v, type_name: str | None = None, default=None) -> str:
    """What to type instead, for a value YAML read as another type than the parameter's (its declared type, else its
    default's kind, says which words to suggest)."""
    words = {True: "Yes/True/on", False: "No/False/off"}
    wants_list = type_name == "list" or isinstance(default, list)
    number = type_name in ("int", "float") or (isinstance(default, (int, float)) and not isinstance(default, bool))
    if isinstance(v, bool) and number:
        example = default if isinstance(default, (int, float)) and not isinstance(default, bool) else "N"
        return (f"; YAML reads {words[v]} as a boolean: give a number, e.g. -p {name} {example}"
                + (" (its default)" if example == default else ""))
    if isinstance(v, bool) and not wants_list and (type_name == "str" or default is None):
        word = "Yes" if v else "No"
        return f"; YAML reads an unquoted {words[v]} as a boolean: quote it, e.g. -p {name} '\"{word}\"'"
    if isinstance(v, bool) and not wants_list:
        return f"; YAML reads {words[v]} as a boolean: give a value such as its default, -p {name} {default}"
    if isinstance(v, bool) or (isinstance(v, list) and any(isinstance(x, bool) for x in v)):
        return (f"; YAML reads an unquoted {'/'.join(words[b] for b in (True, False))} as a boolean: quote each word, "
                f"e.g. -p {name} '[\"Yes\", \"No\"]'")
    if number and isinstance(v, str) and _number(v) is not None:
        n = _number(v)
        full = int(n) if type_name == "int" and n == int(n) else n
        return f"; YAML reads {v!r} as text, not a number (it wants 1.0e+3, not 1e3): write it as -p {name} {full}"
    if type_name == "int" and isinstance(v, float):
        return f"; give a whole number, e.g. -p {name} {round(v) if v == v and abs(v) != float('inf') else 1}"
    if isinstance(v, dict):
        return f"; YAML reads 'key: value' as a mapping: quote it, e.g. -p {name} '\"a: b\"'"
    if v is None:
        return "; YAML reads an empty value, ~ or null as null: quote it to give text"
    return "; quote it to give text"


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def non_finite(v):
    """The first NaN or infinity in ``v`` (a number, or one inside a list or mapping), else None."""
    import math

    if isinstance(v, float) and not math.isfinite(v):
        return v
    inner = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else ()
    return next((x for x in map(non_finite, inner) if x is not None), None)


def check_value(name: str, v, type_name: str, default, source: str) -> None:
    """``v`` against the parameter's declared type (unannotated: against its default's kind) and its range."""
    bad_number = non_finite(v)
    if bad_number is not None:
        inside = "" if v is bad_number else f" in {v!r}"
        raise ValueError(f"{name}: {source}: must be a finite number, got {bad_number!r}{inside} (NaN and infinity "
                         "are not numbers a parameter can take)")
    allowed = _allowed(type_name)
    bad = None
    if allowed is not None:
        if v is None and default is None:
            pass
        elif not isinstance(v, allowed) or (bool not in allowed and isinstance(v, bool)):
            bad = f"must be {type_name} (the notebook declares `{name}: {type_name}`)"
    elif isinstance(v, bool) and not isinstance(default, bool) and default is not None:
        bad = f"must not be a boolean (its default is {default!r})"
    elif isinstance(v, dict) and not isinstance(default, dict):
        bad = f"must not be a mapping (its default is {default!r})"
    if bad is None and isinstance(v, list) and isinstance(default, list) and default \
            and all(isinstance(x, str) for x in default) and any(isinstance(x, bool) or x is None for x in v):
        bad = f"must be a list of texts (its default is {default!r})"
    if bad:
        raise ValueError(f"{name}: {source}: {bad}, got {_kind(v)} {v!r}{_hint(name, v, type_name, default)}")
    check = RANGES.get(name)
    if check is not None and not (v is None and default is None and type_name != "int") and not check(v):
        raise ValueError(f"{name}: {source}: must be {check.allowed}, got {v!r}")
    if name == "run_dir":
        paths.check_run_dir(v)


def check_values(notebook: str | Path, params: dict, source: str) -> None:
    """Every value in ``params`` checked against the notebook's declared types and the ranges (unknown names are the
    caller's check)."""
    types = declared(notebook)
    for name, v in params.items():
        if name in types:
            check_value(name, v, *types[name], source)
