"""Each reader's declaration beside its code, and the shared files generated from them.

A reader module ``extract/datasets/<module>.py`` has a ``<module>.toml`` next to it: the dataset ``key``, its
``[catalog]`` entry (name, table title, annotation, access, paper) and its ``[vocabulary]`` label map
(classes, grounding, ignore, no_finding, ``[vocabulary.labels]``). Three files are generated from them,
comments included, so none is kept by hand:

* ``schemas/datasets.toml`` (the ``[datasets.<key>]`` tables and ``table_order``),
* the ``[datasets.<key>]`` tables at the end of ``schemas/findings.toml``,
* the dataset table of ``data_cards/README.md`` (the data-card index).

The shared layer (``xbench.schemas``: store validation, tables, the scorer) keeps reading the generated files,
so it never imports a reader. Order: the keys already in datasets.toml keep their place (the contract's order and
the paper's table order); a new key goes to the end of both. ``tests/datasets/test_declarations.py`` checks that
the generated files are up to date.

    python -m xbench.extract.datasets.declarations           # exit 1 and name the stale files
    python -m xbench.extract.datasets.declarations --write   # regenerate them

The catalog table of a declaration ends at its first blank line; everything from ``[vocabulary]`` on is
copied into findings.toml as written. (Package files, not outside input: read with tomllib.)
"""
from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parents[1]  # the xbench package (the repository root in a checkout)
TARGETS = {"datasets": Path("schemas/datasets.toml"), "findings": Path("schemas/findings.toml"),
           "cards": Path("data_cards/README.md")}
_WIDTH = 109  # table_order's lines stay under the repository's 110 columns


@dataclass(frozen=True)
class Declaration:
    """One reader's declaration: ``catalog_text`` and ``vocabulary_text`` are the TOML as written."""

    key: str
    source: Path
    catalog: dict
    vocabulary: dict
    catalog_text: str
    vocabulary_text: str


class DeclarationError(ValueError):
    """A declaration file that cannot be turned into the shared files (names the file)."""


def parse(path: Path) -> Declaration:
    text = path.read_text(encoding="utf-8")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DeclarationError(f"{path}: {exc}") from None
    key = doc.get("key")
    if not (isinstance(key, str) and key.isidentifier() and key == key.lower()):
        raise DeclarationError(f"{path}: `key` must be the dataset key, a lower-case identifier")
    if not isinstance(doc.get("catalog"), dict) or not isinstance(doc.get("vocabulary"), dict):
        raise DeclarationError(f"{path}: needs a [catalog] table and a [vocabulary] table")
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line.split("#")[0].strip() == "[catalog]"]
    voc = [i for i, line in enumerate(lines) if line.split("#")[0].strip() == "[vocabulary]"]
    if len(starts) != 1 or len(voc) != 1 or voc[0] < starts[0]:
        raise DeclarationError(f"{path}: write [catalog] once, then [vocabulary] once (in that order)")
    body = []
    for line in lines[starts[0] + 1:]:
        if not line.strip():
            break
        body.append(line)
    return Declaration(key, path, doc["catalog"], doc["vocabulary"], "\n".join(body) + "\n",
                       "\n".join(lines[voc[0]:]).rstrip("\n") + "\n")


def declarations(folder: Path = HERE) -> dict[str, Declaration]:
    """Every declaration (``*.toml``) of the readers' folder, by key."""
    out: dict[str, Declaration] = {}
    for path in sorted(folder.glob("*.toml")):
        d = parse(path)
        if d.key in out:
            raise DeclarationError(f"{path}: key {d.key!r} is already declared by {out[d.key].source.name}")
        out[d.key] = d
    return out


def _ordered(previous: list[str], keys) -> list[str]:
    """The previous order of the keys still declared, then the new keys (sorted)."""
    return [k for k in previous if k in keys] + sorted(set(keys) - set(previous))


def _wrap_list(prefix: str, items: list[str]) -> str:
    """``prefix["a", "b", ...]`` filled greedily to :data:`_WIDTH` columns, continuation lines under the first item."""
    if not items:
        return prefix + "[]"
    pieces = [f'"{item}",' for item in items[:-1]] + [f'"{items[-1]}"]']
    lines = [prefix + "[" + pieces[0]]
    for piece in pieces[1:]:
        if len(lines[-1]) + 1 + len(piece) > _WIDTH:
            lines.append(" " * (len(prefix) + 1) + piece)
        else:
            lines[-1] += " " + piece
    return "\n".join(lines)


def render_datasets(current: str, decls: dict[str, Declaration]) -> str:
    doc = tomllib.loads(current)
    order = _ordered(list(doc.get("datasets", {})), decls)
    table = _ordered(list(doc.get("table_order", [])), decls)
    head = current[:re.search(r"(?m)^table_order\s*=", current).start()]
    sections = [f"[datasets.{k}]\n{decls[k].catalog_text}" for k in order]
    return head + _wrap_list("table_order = ", table) + "\n\n" + "\n".join(sections)


def render_findings(current: str, datasets_text: str, decls: dict[str, Declaration]) -> str:
    order = list(tomllib.loads(datasets_text)["datasets"])
    head = current[:re.search(r"(?m)^\[datasets\.", current).start()] if re.search(r"(?m)^\[datasets\.", current) \
        else current.rstrip("\n") + "\n\n"
    sections = []
    for k in order:
        text = decls[k].vocabulary_text.replace("[vocabulary]", f"[datasets.{k}]", 1)
        sections.append(re.sub(r"(?m)^\[vocabulary\.labels\]", f"[datasets.{k}.labels]", text))
    return head + "\n".join(sections)


def render_cards(current: str, datasets_text: str) -> str:
    doc = tomllib.loads(datasets_text)["datasets"]
    rows = [f"| `{k}` | [{k}.md]({k}.md) | {d['annotation']} | {d['access']} |" for k, d in doc.items()]
    match = re.search(r"(?m)^\|---\|.*\n((?:\|.*\n)*)", current)
    if match is None:
        raise DeclarationError("data_cards/README.md: no dataset table (a |---| line) to fill")
    return current[:match.start(1)] + "".join(r + "\n" for r in rows) + current[match.end(1):]


def render(root: Path = PACKAGE_ROOT, folder: Path = HERE) -> dict[str, str]:
    """{target: the text it should have}; every generated value is checked against the declarations."""
    decls = declarations(folder)
    current = {name: (root / path).read_text(encoding="utf-8") for name, path in TARGETS.items()}
    datasets = render_datasets(current["datasets"], decls)
    findings = render_findings(current["findings"], datasets, decls)
    parsed_d, parsed_f = tomllib.loads(datasets)["datasets"], tomllib.loads(findings)["datasets"]
    for k, d in decls.items():  # a text copy that does not read back as declared would be a silent change
        if parsed_d[k] != d.catalog or parsed_f[k] != d.vocabulary:
            raise DeclarationError(f"{d.source}: its generated tables do not read back as declared "
                                   "(the [catalog] table must end at its first blank line)")
    out = {"datasets": datasets, "findings": findings, "cards": render_cards(current["cards"], datasets)}
    return out


def stale(root: Path = PACKAGE_ROOT, folder: Path = HERE) -> list[str]:
    """The generated files that differ from what the declarations give."""
    return [str(TARGETS[n]) for n, text in render(root, folder).items()
            if (root / TARGETS[n]).read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--write"]):
        print("usage: python -m xbench.extract.datasets.declarations [--write]", file=sys.stderr)
        return 2
    if argv == ["--write"]:
        for name, text in render().items():
            path = PACKAGE_ROOT / TARGETS[name]
            if path.read_text(encoding="utf-8") != text:
                tmp = path.with_suffix(path.suffix + ".tmp")
                tmp.write_text(text, encoding="utf-8")
                tmp.replace(path)
                print(f"wrote {TARGETS[name]}")
        return 0
    old = stale()
    for path in old:
        print(f"{path} is stale: python -m xbench.extract.datasets.declarations --write", file=sys.stderr)
    return 1 if old else 0


if __name__ == "__main__":
    sys.exit(main())
