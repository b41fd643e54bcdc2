"""Image augmentations as plug-ins: one module per augmentation in this package (docs/how-to/augmentations.md).

Each public module here defines ``AUGMENTATION``, an :class:`Augmentation`; the package is listed, so adding
one is adding its file (and its test). Installed packages add theirs through the ``xbench.augmentations``
entry point group. A use of one is written ``NAME`` or ``NAME:key=value,...`` (every parameter has a
default) and parsed into an :class:`AugmentSpec`:

>>> spec = parse_spec("rotate:degrees=10")
>>> str(spec), spec.geometric
('rotate:degrees=10', True)
>>> [str(s) for s in parse_specs("hflip,brightness:delta=-8,translate:x=4,y=2")]
['hflip', 'brightness:delta=-8', 'translate:x=4,y=2,side=512']

The exact definitions (coordinates, interpolation, fill, seeding) are in docs/contract.md,
"Augmentations". numpy only (Pillow is imported by ``jpeg`` when it runs); no torch, zarr or I/O.
"""
from __future__ import annotations

import difflib
from typing import Iterable

from xbench.schemas.errors import InputError
from xbench.schemas.registry import ENTRY_POINT_GROUPS, PluginError, Registry
from xbench.schemas.augment._base import AugmentSpec, Augmentation, Param, fmt

__all__ = ["AUGMENTATIONS", "AugmentSpec", "Augmentation", "MAX_SPEC_CHARS", "MAX_SPECS", "Param",
           "augmentation_names", "parse_spec", "parse_specs"]

#: the longest spec text accepted (the longest built-in canonical spec is well under 60 characters)
MAX_SPEC_CHARS = 200
#: the most augmentations one run may list (test-time augmentation costs one forward pass per view)
MAX_SPECS = 16

AUGMENTATIONS: Registry[Augmentation] = Registry("augmentation", check=Augmentation,
                                                  entry_point_group=ENTRY_POINT_GROUPS["augmentation"],
                                                  hint="(docs/how-to/augmentations.md lists them)")
AUGMENTATIONS.discover(__name__, __path__, attr="AUGMENTATION")  # every public module here is one


def augmentation_names() -> list[str]:
    return AUGMENTATIONS.names()


def _shown(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit - 3] + "...")


def parse_spec(text: str) -> AugmentSpec:
    """``NAME`` or ``NAME:key=value,...`` -> :class:`AugmentSpec` (defaults filled). An unknown name raises
    :class:`UnknownNameError` (with close names); any other problem an :class:`InputError`, one line each."""
    if not isinstance(text, str):
        raise InputError(f"an augmentation spec must be a string like 'rotate:degrees=10', got {type(text).__name__}")
    if len(text) > MAX_SPEC_CHARS:
        raise InputError(f"augmentation spec {_shown(text)} is {len(text)} characters long; the limit is {MAX_SPEC_CHARS}")
    name, sep, rest = text.strip().partition(":")
    name = name.strip()
    if not name:
        raise InputError(f"augmentation spec {_shown(text)}: no name; write NAME or NAME:key=value,... "
                         f"(one of {', '.join(augmentation_names())})")
    aug = AUGMENTATIONS.get(name)
    if aug.name != name:  # the canonical text must parse back to the same augmentation
        raise PluginError(f"augmentation {name!r} is registered under another name than its own ({aug.name!r})")
    where = f"augmentation {_shown(text.strip())}"
    params = aug.defaults()
    known = [p.name for p in aug.params]
    by_name = {p.name: p for p in aug.params}
    problems, seen = [], set()
    if sep and not rest.strip():
        problems.append(f"{where}: nothing after ':'; give key=value pairs or leave the ':' out")
    for item in (rest.split(",") if rest.strip() else []):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            problems.append(f"{where}: {_shown(item.strip())} is not key=value")
            continue
        if key not in by_name:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            takes = f"; {name} takes {', '.join(known)}" if known else f"; {name} takes no parameters"
            problems.append(f"{where}: unknown key {_shown(key)}{hint}{takes}")
            continue
        if key in seen:
            problems.append(f"{where}: {key} is given twice")
            continue
        seen.add(key)
        parsed, problem = by_name[key].parse(value)
        if problem:
            problems.append(f"{where}: {key} {problem}")
        else:
            params[key] = parsed
    if not problems and aug.check is not None:
        problems += [f"{where}: {p}" for p in aug.check(params)]
    if problems:
        raise InputError(problems)
    return AugmentSpec(aug.name, params, aug)


def _split(text: str) -> list[str]:
    """Specs of one comma-separated text: a comma starts a new spec unless the token after it has an ``=``."""
    specs: list[str] = []
    for token in text.split(","):
        if "=" in token and specs and ":" not in token.partition("=")[0]:
            specs[-1] += "," + token
        else:
            specs.append(token)
    return specs


def parse_specs(texts: str | Iterable[str] | None) -> list[AugmentSpec]:
    """Specs from one comma-separated text or several (each may hold several): ``"hflip,rotate:degrees=5"``.
    Every problem of every spec is reported together; the same deterministic spec twice is refused (it would
    weigh one view double), seeded ones (noise) may repeat: each repeat draws its own noise."""
    if texts is None:
        return []
    if isinstance(texts, str):
        texts = [texts]
    pieces: list[str] = []
    for text in texts:
        if not isinstance(text, str):
            raise InputError(f"an augmentation spec must be a string like 'rotate:degrees=10', got {type(text).__name__}")
        if len(text) > MAX_SPEC_CHARS * MAX_SPECS:
            raise InputError(f"augmentation list {_shown(text)} is {len(text)} characters long; "
                             f"the limit is {MAX_SPEC_CHARS * MAX_SPECS}")
        pieces += _split(text)
    if len(pieces) > MAX_SPECS:
        raise InputError(f"{len(pieces)} augmentations given; at most {MAX_SPECS} (each costs a pass over the data)")
    specs, problems = [], []
    for piece in pieces:
        if not piece.strip():
            problems.append("an empty augmentation spec (two commas in a row, or a comma at an end)")
            continue
        try:
            specs.append(parse_spec(piece))
        except InputError as e:
            problems += e.problems or [str(e)]
    if problems:
        raise InputError(problems)
    seen = set()
    for spec in specs:
        if str(spec) in seen and not spec.seeded:
            problems.append(f"augmentation {str(spec)!r} is listed twice (a deterministic view counts once)")
        seen.add(str(spec))
    if problems:
        raise InputError(problems)
    return specs


def canonical(specs: Iterable[AugmentSpec]) -> list[str]:
    """The canonical texts of ``specs`` (provenance, suites, argv)."""
    return [str(s) for s in specs]


__all__ += ["canonical", "fmt"]
