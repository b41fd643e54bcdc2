"""Perturbed copies of a dataset's cases (the weight-free robustness track; contract §Robustness track).

``xbench-prepare ... --perturb SPEC[,SPEC...] [--perturb-copies K]`` adds, to each dataset group of the
images store, K perturbed copies of every case per SPEC (one for a SPEC whose copies could not differ: neither
seeded nor ranged, e.g. ``hflip``), as ordinary-looking case rows under opaque ids; the
private ground truth keeps which clean case each copy comes from and the exact augmentation applied to it:

    gt.zarr/<dataset>/   (gt minor 3, all or none)
        perturb_id     (P,) str    the copy's case id in images.zarr (and in a submission)
        perturb_case   (P,) int64  the clean case's row in this group
        perturb_group  (P,) int32  which SPEC of the ``perturbation`` attribute made the copy
        perturb_spec   (P,) str    the augmentation applied, canonical, parameters drawn (``rotate:degrees=3.2``)
        perturb_seed   (P,) int64  the seed the augmentation's image function was given
        perturb_query_id   (R,) str    with phrase rows only: the copies' phrase row ids (images.zarr, submission)
        perturb_query_of   (R,) int64  the clean phrase row each copies (a row of query_id; never a text probe)
        perturb_query_copy (R,) int64  the copy that carries it (a row of perturb_id)
      attrs: perturbation = {"specs": [SPEC, ...], "copies": K, "seed": S}

The copies are not cases of the ground truth (``case_id`` and ``labels`` hold the clean cases only), so every
clean metric is exactly what it is without them.

Drawing (the design in one place, all of it a function of ``seed``, the dataset key, the clean case id, the
SPEC's position and the copy's number k, never of worker counts or order):

* a SPEC is an augmentation spec (``xbench.schemas.augment``) whose numeric parameters may be given as a
  closed range ``LOW..HIGH`` (``rotate:degrees=-10..10``); each copy draws each ranged parameter uniformly in
  it (an integer parameter: uniformly among the integers, both ends included; a real one: uniformly,
  rounded to 4 decimals) from its own generator; fixed parameters are used as given;
* each copy's seed (for seeded augmentations such as ``noise``) and id come from keyed SHA-256 hashes of
  (dataset, case id, SPEC position, k) with the key ``seed``: different copies get unrelated seeds, and the
  id cannot be linked to its clean case without the key, which is written only to the ground truth.

This module imports numpy and the augmentation package only (the schemas layer).
"""
from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

import numpy as np

from xbench.schemas.errors import InputError, InvalidStoreError, Problem
from xbench.schemas.schema_versions import minor

GT_MINOR = minor("ground-truth", "perturbations")  # the gt minor version that adds the perturbation table
IMAGES_MINOR = minor("images", "perturbations")  # the images minor version of a store holding perturbed copies
ARRAYS = ("perturb_id", "perturb_case", "perturb_group", "perturb_spec", "perturb_seed")
QUERY_ARRAYS = ("perturb_query_id", "perturb_query_of", "perturb_query_copy")  # the copies' phrase rows
ATTR = "perturbation"
IMAGES_ATTR = "perturbed_copies"  # count of copy rows in an images group (public: how many, never which)
MAX_SPECS = 16
MAX_COPIES = 32
MAX_SPEC_CHARS = 200
ID_PREFIX = "p"
_PARAM = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*=")  # a key=value token (a SPEC's name has no "=" before its ":")
_RANGE = re.compile(r"^([+-]?[0-9.eE+-]+)\.\.([+-]?[0-9.eE+-]+)$")


@dataclass(frozen=True)
class Template:
    """One ``--perturb`` SPEC: the augmentation's name, its fixed parameters and its ranged ones."""

    text: str                        # canonical: every parameter in declared order, a range as LOW..HIGH
    name: str
    fixed: dict
    ranges: dict                     # {key: (low, high, is_int)}
    seeded: bool = False             # the augmentation's image depends on the seed (noise)

    @property
    def varies(self) -> bool:
        """Whether two copies may differ: the augmentation is seeded or a range has LOW < HIGH."""
        return self.seeded or any(lo < hi for lo, hi, _ in self.ranges.values())

    def copies(self, k: int) -> int:
        """Copies per case for ``--perturb-copies k``: k, or 1 when every copy would be the same image (K
        identical copies would only cost extraction and weigh one perturbation K times in ``flip_any``)."""
        return int(k) if self.varies else 1

    def draw(self, rng: np.random.Generator) -> str:
        """A spec with every ranged parameter drawn (module doc), as canonical text."""
        from xbench.schemas.augment import parse_spec

        params = dict(self.fixed)
        for key in sorted(self.ranges):
            low, high, is_int = self.ranges[key]
            params[key] = int(rng.integers(int(low), int(high), endpoint=True)) if is_int \
                else round(float(rng.uniform(low, high)), 4)
        text = self.name + (":" + ",".join(f"{k}={v}" for k, v in params.items()) if params else "")
        return str(parse_spec(text))


def split_specs(text: str) -> list[str]:
    """``a,b:k=1,j=2,c`` -> [``a``, ``b:k=1,j=2``, ``c``]: a comma starts a new SPEC unless the token after it
    is a ``key=value`` of the SPEC before (the augmentation package's rule)."""
    out: list[str] = []
    for token in str(text).split(","):
        token = token.strip()
        if out and _PARAM.match(token):
            out[-1] += "," + token
        else:
            out.append(token)
    return out


def parse_template(text: str) -> Template:
    """A ``--perturb`` SPEC; :class:`InputError` (one line) when it or a range in it is wrong."""
    from xbench.schemas.augment import parse_spec

    text = str(text).strip()
    if not text or len(text) > MAX_SPEC_CHARS:
        raise InputError([f"--perturb: a SPEC must have 1 to {MAX_SPEC_CHARS} characters, got {len(text)}"])
    name, _, rest = text.partition(":")
    fixed: dict = {}
    ranged: dict = {}
    for token in filter(None, (t.strip() for t in rest.split(","))):
        key, eq, value = token.partition("=")
        m = _RANGE.match(value.strip()) if eq else None
        if m:
            ranged[key.strip()] = (m.group(1), m.group(2))
        else:
            fixed[key.strip()] = value.strip()
    head = name.strip() + (":" + ",".join(f"{k}={v}" for k, v in fixed.items()) if fixed else "")
    base = parse_spec(head)  # unknown name (did you mean), bad fixed parameters: the package's own lines
    ranges = {}
    for key, (lo, hi) in ranged.items():
        if key not in base.params:
            import difflib

            close = difflib.get_close_matches(key, list(base.params), n=1)
            raise InputError([f"--perturb {text}: {base.name} has no parameter {key!r}"
                              + (f" (did you mean {close[0]}?)" if close else "")
                              + f"; it takes {', '.join(base.params) or 'none'}"])
        is_int = isinstance(base.params[key], int) and not isinstance(base.params[key], bool)
        try:
            low, high = (int(lo), int(hi)) if is_int else (float(lo), float(hi))
        except ValueError:
            raise InputError([f"--perturb {text}: {key}={lo}..{hi} needs two {'integers' if is_int else 'numbers'}"]) from None
        if not (np.isfinite(low) and np.isfinite(high)) or low > high:
            raise InputError([f"--perturb {text}: {key}={lo}..{hi} must go from a low to a high finite value"])
        for end in (low, high):  # both ends must be values the augmentation takes
            parse_spec(f"{base.name}:{key}={end}" + "".join(f",{k}={v}" for k, v in fixed.items() if k != key))
        ranges[key] = (low, high, is_int)
    fixed_canonical = {k: v for k, v in base.params.items() if k not in ranges}
    return Template(canonical_text(base, ranges), base.name, fixed_canonical, ranges, bool(base.seeded))


def canonical_text(base, ranges: dict) -> str:
    """The canonical SPEC: the augmentation's canonical spec with each ranged parameter written ``LOW..HIGH``
    (the same number formatting), so two spellings of one SPEC (``rotate``, ``rotate:degrees=10``;
    ``rotate:degrees=-10.0..10``, ``rotate:degrees=-10..10``) are one text: one fingerprint, one key."""
    from xbench.schemas.augment import fmt

    if not ranges:
        return str(base)
    order = [p.name for p in base.augmentation.params]
    return base.name + ":" + ",".join(f"{k}={fmt(ranges[k][0])}..{fmt(ranges[k][1])}" if k in ranges
                                      else f"{k}={fmt(base.params[k])}" for k in order)


def copies_per_spec(specs, k: int) -> list[int]:
    """Copies per case of each SPEC text of a table (:meth:`Template.copies`); InputError for a bad SPEC."""
    return [parse_template(t).copies(k) for t in specs]


def parse_templates(items) -> list[Template]:
    """Every SPEC of ``--perturb`` (repeatable, each comma-separated); bounded to :data:`MAX_SPECS`."""
    texts = [t for item in items for t in split_specs(item) if t]
    if len(texts) > MAX_SPECS:
        raise InputError([f"--perturb: {len(texts)} SPECs; at most {MAX_SPECS}"])
    if not texts:
        return []
    problems, out = [], []
    for t in texts:
        try:
            out.append(parse_template(t))
        except InputError as exc:
            problems += [str(p) for p in exc.problems] or [str(exc)]
    if problems:
        raise InputError(problems)
    if len({t.text for t in out}) != len(out):
        raise InputError(["--perturb: a SPEC is given twice (ask for more copies with --perturb-copies)"])
    return out


def _digest(key: int, *parts: str) -> bytes:
    return hmac.new(str(int(key)).encode(), "\0".join(parts).encode(), hashlib.sha256).digest()


def copy_id(seed: int, dataset: str, case_id: str, spec_index: int, k: int) -> str:
    return ID_PREFIX + _digest(seed, "id", dataset, case_id, str(spec_index), str(k)).hex()[:24]


def query_copy_id(seed: int, dataset: str, copy_id_: str, query_id: str) -> str:
    return "q" + _digest(seed, "query", dataset, copy_id_, query_id).hex()[:24]


def copy_seed(seed: int, dataset: str, case_id: str, spec_index: int, k: int) -> int:
    return int.from_bytes(_digest(seed, "seed", dataset, case_id, str(spec_index), str(k))[:8], "little") >> 1


@dataclass(frozen=True)
class Perturbations:
    """The perturbation table of one dataset group (module doc); rows ordered by copy id."""

    id: np.ndarray      # (P,) str
    case: np.ndarray    # (P,) int64
    group: np.ndarray   # (P,) int32
    spec: np.ndarray    # (P,) str
    seed: np.ndarray    # (P,) int64
    specs: tuple[str, ...]
    copies: int
    key: int
    # the copies' phrase rows (only on a dataset with phrase rows): each copy gets one row per original phrase row
    # of its clean case, in the clean rows' order; copies in table order (module doc, "Phrase rows")
    query_id: np.ndarray | None = None     # (R,) str   the copy's phrase row id in images.zarr / a submission
    query_of: np.ndarray | None = None     # (R,) int64 the clean phrase row (row of the gt's query arrays)
    query_copy: np.ndarray | None = None   # (R,) int64 the copy (row of this table)

    def __len__(self) -> int:
        return len(self.id)

    def with_queries(self, dataset: str, query_ids, query_case, original) -> "Perturbations":
        """This table with its copies' phrase rows: copy j (in table order) gets, for every original (not probe)
        phrase row q of its clean case in row order, the row ``query_copy_id(key, dataset, id_j, query_id_q)``."""
        qids = np.asarray(query_ids, dtype=str)
        qcase = np.asarray(query_case, np.int64)
        rows_of: dict[int, list[int]] = {}
        for q in np.flatnonzero(np.asarray(original, bool)).tolist():
            rows_of.setdefault(int(qcase[q]), []).append(q)
        ids, of, copy = [], [], []
        for j, (cid, case) in enumerate(zip(self.id.tolist(), self.case.tolist())):
            for q in rows_of.get(case, ()):
                ids.append(query_copy_id(self.key, dataset, cid, str(qids[q])))
                of.append(q)
                copy.append(j)
        if len(set(ids)) != len(ids) or set(ids) & set(qids.tolist()):
            raise InputError([f"{dataset}: two phrase rows of the perturbed copies drew the same id; use another --seed"])
        from dataclasses import replace

        return replace(self, query_id=np.asarray(ids, dtype=str), query_of=np.asarray(of, np.int64),
                       query_copy=np.asarray(copy, np.int64))

    def copy_queries(self, queries, n_cases: int):
        """The copies' phrase rows as images.zarr rows (``queries``: the clean rows with text; the copies' image
        rows follow the ``n_cases`` clean ones in table order)."""
        from xbench.schemas.queries import Queries

        of = self.query_of
        return Queries(self.query_id, n_cases + self.query_copy, np.asarray(queries.category)[of],
                       None if queries.text is None else np.asarray(queries.text)[of])

    def attrs(self) -> dict:
        return {"specs": list(self.specs), "copies": int(self.copies), "seed": int(self.key)}


def plan_copies(dataset: str, case_ids, templates: list[Template], copies: int, seed: int) -> Perturbations:
    """Every copy of every case (module doc), sorted by id, so that row order says nothing of the clean case."""
    if not 1 <= copies <= MAX_COPIES:
        raise InputError([f"--perturb-copies must be between 1 and {MAX_COPIES}, got {copies}"])
    ids, cases, groups, specs, seeds = [], [], [], [], []
    for row, cid in enumerate(np.asarray(case_ids, dtype=str).tolist()):
        for s, t in enumerate(templates):
            for k in range(t.copies(copies)):
                cs = copy_seed(seed, dataset, cid, s, k)
                ids.append(copy_id(seed, dataset, cid, s, k))
                cases.append(row)
                groups.append(s)
                specs.append(t.draw(np.random.default_rng(cs)) if t.ranges else t.text)
                seeds.append(cs)
    order = np.argsort(np.asarray(ids, dtype=str), kind="stable")
    taken = set(np.asarray(case_ids, dtype=str).tolist())
    if len(set(ids)) != len(ids) or taken & set(ids):  # 96-bit ids: never in practice, refused if ever
        raise InputError([f"{dataset}: two perturbed copies (or a copy and a case) drew the same id; use another --seed"])
    return Perturbations(np.asarray(ids, dtype=str)[order], np.asarray(cases, np.int64)[order],
                         np.asarray(groups, np.int32)[order], np.asarray(specs, dtype=str)[order],
                         np.asarray(seeds, np.int64)[order], tuple(t.text for t in templates), int(copies), int(seed))


# ----------------------------------------------------------------------------------------- the gt arrays
def write_arrays(g, p: Perturbations) -> None:
    """The table into a dataset group being built (write_ground_truth); the attribute beside it."""
    n = max(len(p), 1)
    names, columns = list(ARRAYS), [p.id, p.case, p.group, p.spec, p.seed]
    if p.query_id is not None:  # only on a dataset with phrase rows: a store without them is as before
        names += QUERY_ARRAYS
        columns += [p.query_id, p.query_of, p.query_copy]
    for name, values in zip(names, columns):
        n = max(len(values), 1)
        dim = ("copy",) if name in ARRAYS else ("copy_query",)
        if values.dtype.kind == "U":
            a = g.create_array(name, shape=(len(values),), dtype=str, chunks=(n,), dimension_names=dim)
            a[:] = values
        else:
            g.create_array(name, data=values, chunks=(n,), dimension_names=dim, config={"write_empty_chunks": True})
    g.attrs[ATTR] = p.attrs()


def check_queries(p: Perturbations, queries, original, where: str, n_cases: int) -> list[Problem]:
    """The copies' phrase rows against the dataset's phrase rows ``queries`` (ids, cases) and which of them are
    originals (not text probes): every copy has exactly one row per original phrase row of its clean case."""
    from xbench.schemas.store import check_strings

    if p.query_id is None:
        return []
    if queries is None:
        return [Problem(f"{where}/perturb_query_id", "the copies have phrase rows but the dataset has none")]
    size = len(p.query_id)
    if any(a is None or len(a) != size for a in (p.query_of, p.query_copy)):
        return [Problem(where, "perturb_query_* arrays differ in length")]
    out: list[Problem] = []
    check_strings(p.query_id, f"{where}/perturb_query_id", "phrase row id", out)
    if out:
        return out
    if len(np.unique(p.query_id)) != size or (p.query_id == "").any():
        out.append(Problem(f"{where}/perturb_query_id", "the copies' phrase row ids must be unique and non-empty"))
    if size and np.isin(p.query_id, np.asarray(queries.id, dtype=str)).any():
        out.append(Problem(f"{where}/perturb_query_id", "a copy's phrase row id is also a phrase row id"))
    nq = len(queries)
    if size and ((p.query_of < 0).any() or (p.query_of >= nq).any()):
        return out + [Problem(f"{where}/perturb_query_of", f"rows must be in 0..{nq - 1}")]
    if size and ((p.query_copy < 0).any() or (p.query_copy >= len(p)).any()):
        return out + [Problem(f"{where}/perturb_query_copy", f"rows must be in 0..{len(p) - 1}")]
    original = np.asarray(original, bool)
    qcase = np.asarray(queries.case, np.int64)
    if original.shape != qcase.shape or (qcase.size and (qcase.min() < 0 or qcase.max() >= n_cases)):
        return out  # broken phrase rows: their own checks report them
    if size and not original[p.query_of].all():
        out.append(Problem(f"{where}/perturb_query_of", "a copy's phrase row must copy an original phrase row, not a probe"))
    if size and (qcase[p.query_of] != p.case[p.query_copy]).any():
        out.append(Problem(f"{where}/perturb_query_of", "a copy's phrase row must copy a phrase row of its clean case"))
    pair = p.query_copy * max(nq, 1) + p.query_of
    if size and len(np.unique(pair)) != size:
        out.append(Problem(f"{where}/perturb_query_of", "a copy has one phrase row copied twice"))
    want = np.bincount(qcase[original], minlength=n_cases)[p.case]
    have = np.bincount(p.query_copy, minlength=len(p)) if size else np.zeros(len(p), np.int64)
    if (have != want).any():
        j = int(np.argmax(have != want))
        out.append(Problem(f"{where}/perturb_query_copy", f"copy {str(p.id[j])!r} has {have[j]} phrase rows; its clean "
                                                          f"case has {want[j]} original phrase rows"))
    return out


def check(p: Perturbations, case_ids, where: str) -> list[Problem]:
    """Every inconsistency of a table against its dataset's case ids (writer and validator alike)."""
    from xbench.schemas.augment import parse_spec
    from xbench.schemas.store import MAX_CASES, check_strings

    out: list[Problem] = []
    n = len(case_ids)
    if not (isinstance(p.specs, tuple) and 1 <= len(p.specs) <= MAX_SPECS and all(isinstance(s, str) for s in p.specs)):
        return [Problem(where, f"attribute '{ATTR}.specs' must list 1 to {MAX_SPECS} augmentation specs")]
    if not (isinstance(p.copies, int) and not isinstance(p.copies, bool) and 1 <= p.copies <= MAX_COPIES):
        return [Problem(where, f"attribute '{ATTR}.copies' must be an integer between 1 and {MAX_COPIES}")]
    if not (isinstance(p.key, int) and not isinstance(p.key, bool) and p.key >= 0):
        return [Problem(where, f"attribute '{ATTR}.seed' must be an integer >= 0")]
    size = len(p.id)
    if len(p) > MAX_CASES:
        return [Problem(f"{where}/perturb_id", f"declares {size} copies; the limit is {MAX_CASES}")]
    if any(len(a) != size for a in (p.case, p.group, p.spec, p.seed)):
        return [Problem(where, "perturb_* arrays differ in length")]
    templates, counts = [], []
    for s, text in enumerate(p.specs):
        try:
            t = parse_template(text)
        except InputError as exc:
            return [Problem(f"{where}", f"attribute '{ATTR}.specs' item {s}: {exc.problems[0] if exc.problems else exc}")]
        templates.append(t.name)
        counts.append(t.copies(p.copies))
    if size != n * sum(counts):
        out.append(Problem(f"{where}/perturb_id", f"{size} copies; {n} case(s) x ({' + '.join(map(str, counts))}) "
                                                  f"copies per case of the {len(p.specs)} spec(s) make {n * sum(counts)}"))
    check_strings(p.id, f"{where}/perturb_id", "copy id", out)
    check_strings(p.spec, f"{where}/perturb_spec", "spec", out)
    if out:
        return out
    if len(np.unique(p.id)) != size or (p.id == "").any():
        out.append(Problem(f"{where}/perturb_id", "copy ids must be unique and non-empty"))
    if np.isin(p.id, np.asarray(case_ids, dtype=str)).any():
        out.append(Problem(f"{where}/perturb_id", "a copy id is also a case id"))
    if size and ((p.case < 0).any() or (p.case >= n).any()):
        return out + [Problem(f"{where}/perturb_case", f"rows must be in 0..{n - 1}")]
    if size and ((p.group < 0).any() or (p.group >= len(p.specs)).any()):
        return out + [Problem(f"{where}/perturb_group", f"must be in 0..{len(p.specs) - 1}")]
    if size and (p.seed < 0).any():
        out.append(Problem(f"{where}/perturb_seed", "seeds must be >= 0"))
    if size:
        per = np.bincount(p.case * len(p.specs) + p.group, minlength=n * len(p.specs))
        want = np.tile(np.asarray(counts, np.int64), n)
        if (per != want).any():
            bad = int(np.argmax(per != want))
            out.append(Problem(f"{where}/perturb_case", f"every case needs exactly {want[bad]} copies of spec "
                                                        f"{p.specs[bad % len(p.specs)]!r} (copies {p.copies}; one for "
                                                        f"a spec whose copies cannot differ); case row "
                                                        f"{bad // len(p.specs)} has {per[bad]}"))
    texts, inverse = np.unique(p.spec, return_inverse=True)
    names = []
    for text in texts.tolist():  # each distinct spec parsed once (linear in P)
        try:
            names.append(parse_spec(text).name)
        except InputError as exc:
            return out + [Problem(f"{where}/perturb_spec", f"{text!r}: {exc.problems[0] if exc.problems else exc}")]
    wrong = np.asarray(names, dtype=object)[inverse.ravel()] != np.asarray(templates, dtype=object)[p.group]
    if size and wrong.any():
        j = int(np.argmax(wrong))
        out.append(Problem(f"{where}/perturb_spec", f"row {j}: {str(p.spec[j])!r} is not an instance of its "
                                                    f"perturb_group's spec {p.specs[int(p.group[j])]!r}"))
    return out


def read(g, where: str = "") -> Perturbations | None:
    """The table of a ground-truth dataset group, or None when it has none (read whole: P strings)."""
    from xbench.schemas.store import read_strings

    if not all(a in g for a in ARRAYS):  # none: no copies; some: validate() says what is wrong
        return None
    meta = g.attrs.get(ATTR)
    meta = meta if isinstance(meta, dict) else {}
    specs = meta.get("specs")
    queries = {}
    if all(a in g for a in QUERY_ARRAYS):  # the copies' phrase rows (some only: validate() says what is wrong)
        queries = dict(query_id=read_strings(g["perturb_query_id"]),
                       query_of=np.asarray(g["perturb_query_of"][...], np.int64),
                       query_copy=np.asarray(g["perturb_query_copy"][...], np.int64))
    return Perturbations(read_strings(g["perturb_id"]), np.asarray(g["perturb_case"][...], np.int64),
                         np.asarray(g["perturb_group"][...], np.int64), read_strings(g["perturb_spec"]),
                         np.asarray(g["perturb_seed"][...], np.int64),
                         tuple(specs) if isinstance(specs, list) else specs, meta.get("copies"), meta.get("seed"),
                         **queries)


def validate(g, where: str, minor: int, case_ids) -> list[Problem]:
    """Problems of a ground-truth group's perturbation table (metadata first, then the values)."""
    import zarr

    from xbench.schemas.store import check_array, missing_chunks, describe_missing, stored_problems

    have = [a for a in ARRAYS if a in g]
    if not have and ATTR not in g.attrs:
        return []
    p: list[Problem] = []
    if len(have) != len(ARRAYS):
        return [Problem(where, f"perturbation table incomplete: has {', '.join(have) or 'none'} of {', '.join(ARRAYS)} "
                               f"(and the '{ATTR}' attribute); all or none")]
    if minor < GT_MINOR:
        p.append(Problem(where, f"has perturbed copies but the root attribute xbench.schema_minor is {minor}; "
                                f"they need schema_minor >= {GT_MINOR}"))
    if not isinstance(g.attrs.get(ATTR), dict):
        p.append(Problem(where, f"attribute '{ATTR}' is missing or not an object"))
    have_q = [a for a in QUERY_ARRAYS if a in g]
    if have_q and len(have_q) != len(QUERY_ARRAYS):
        p.append(Problem(where, f"the copies' phrase rows are incomplete: has {', '.join(have_q)} of "
                                f"{', '.join(QUERY_ARRAYS)}; all or none"))
        return p
    for name, dt in zip(ARRAYS + (QUERY_ARRAYS if have_q else ()),
                        (("string",), ("int64",), ("int32",), ("string",), ("int64",), ("string",), ("int64",), ("int64",))):
        arr = g[name]
        if not isinstance(arr, zarr.Array):
            p.append(Problem(f"{where}/{name}", "must be an array, not a group"))
            continue
        if check_array(arr, f"{where}/{name}", shape=(None,), dtypes=dt, problems=p, whole=True):
            gone = missing_chunks(arr)
            if gone:
                p.append(Problem(f"{where}/{name}", describe_missing(arr, gone)))
            p += stored_problems(arr, f"{where}/{name}", trusted=True)
    if p:
        return p
    try:
        table = read(g, where)
    except Exception as exc:  # a chunk that does not decode
        return [Problem(where, f"perturbation table unreadable ({type(exc).__name__}: {exc})")]
    out = check(table, case_ids, where)
    if out or table.query_id is None:
        return out
    from xbench.schemas.probes import read_probes
    from xbench.schemas.queries import read_queries

    try:
        queries, probes = read_queries(g, with_text=False), read_probes(g)
    except Exception:  # broken phrase arrays: their own checks report them
        return [Problem(where, "the copies have phrase rows but the dataset's phrase rows are unreadable")]
    original = np.ones(len(queries), bool) if queries is not None else None
    if queries is not None and probes is not None and len(probes.kind) == len(queries):
        original = ~probes.is_probe
    return check_queries(table, queries, original, where, len(case_ids))


def images_attr_problems(value, n_rows: int, minor: int, where: str) -> list[Problem]:
    """An images group's ``perturbed_copies``: a count of its rows (fewer than all: clean cases come first),
    in a store of minor >= 3."""
    out = []
    if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < max(n_rows, 1)):
        out.append(Problem(where, f"attribute '{IMAGES_ATTR}' must be a count of copy rows below the {n_rows} rows"))
    if minor < IMAGES_MINOR:
        out.append(Problem(where, f"has perturbed copies but the root attribute xbench.schema_minor is {minor}; "
                                  f"they need schema_minor >= {IMAGES_MINOR}"))
    return out


def require_valid(p: Perturbations, case_ids, where: str) -> None:
    problems = check(p, case_ids, where)
    if problems:
        raise InvalidStoreError(problems)
