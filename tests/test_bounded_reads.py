"""Every file from outside is read through the one bounded input layer (issue 44, class 6): schemas/inputs.py
(read_bytes, load_json/yaml/toml/npz, read_zip_member, read_tree) and schemas/budget.py (stores). A direct read
elsewhere (``Path.read_bytes()``/``read_text()``, ``open(..., "r")``, ``json.load``, ``np.load``, ``zipfile.ZipFile``
for reading, ``shutil.copy*``, ``yaml``/``tomllib``/``pickle``/``torch`` ``.load``) must be one listed below, with
the reason it is no file from outside. A new one fails this test: route it through the layer, or list it here
with its reason (reviewed like any change of the contract, docs/contract.md "Untrusted files besides stores")."""
from __future__ import annotations

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("schemas", "score", "extract", "xbench")

_MODULE_READS = {("json", "load"), ("np", "load"), ("numpy", "load"), ("yaml", "load"), ("yaml", "safe_load"),
                 ("yaml", "full_load"), ("tomllib", "load"), ("pickle", "load"), ("torch", "load"),
                 ("shutil", "copy"), ("shutil", "copy2"), ("shutil", "copyfile"), ("shutil", "copytree"),
                 ("shutil", "copyfileobj")}

#: (file, kind): (how many, why it is no unbounded read of a file from outside)
ALLOWED = {
    ("schemas/budget.py", "open"): (2, "the zip's end record, read before zipfile parses it; /proc/self/statm"),
    ("schemas/budget.py", "zipfile.ZipFile"): (1, "the store layer itself: its entry count is checked first"),
    ("schemas/inputs.py", "yaml.load"): (1, "the input layer itself, after its event walk"),
    ("schemas/inputs.py", "zipfile.ZipFile"): (3, "the input layer itself (read_zip_member, load_npz, npz_shape)"),
    ("schemas/catalog.py", "read_text"): (1, "the package's own datasets.toml"),
    ("schemas/vocabulary.py", "read_text"): (1, "the package's own findings.toml"),
    ("schemas/registry.py", "read_text"): (1, "a plug-in module's own source (installed code)"),
    ("schemas/paths.py", "shutil.copytree"): (1, "carries a user's own entries of --out over into the new folder "
                                                 "(links kept as links; hard links first)"),
    ("schemas/paths.py", "shutil.copy2"): (1, "as above, where a hard link is impossible"),
    ("schemas/store.py", "open"): (1, "file_sha256: a hash in 1 MiB pieces of a file already read bounded"),
    ("schemas/store.py", "read_bytes"): (1, "store_sha256 of a folder store after budget.inspect_store refused "
                                            "links, special files and files over the chunk limit"),
    ("score/kernels/counts.py", "np.load"): (1, "pair_counts.npz this run wrote; a file from outside goes "
                                                "through read_counts_file (load_npz)"),
    ("score/sections/pair_counts.py", "np.load"): (1, "as above: the sections' counts in the pair_counts.npz this "
                                                      "run wrote (read_counts_file checks a file from outside)"),
    ("score/report/_load.py", "open"): (1, "pairs.parquet after its size is checked against --max-memory"),
    ("score/report/cli.py", "read_text"): (2, "report.json and leaderboard.txt this command just wrote"),
    ("extract/datasets/declarations.py", "read_text"): (4, "the repository's own declaration files (make target)"),
    ("extract/datasets/perturb.py", "np.load"): (3, "work files this run wrote in its own work folder"),
    ("extract/datasets/prepare.py", "np.load"): (4, "work files this run wrote in its own work folder"),
    ("extract/datasets/prepare.py", "read_text"): (1, "the digest marker of its own work folder"),
    ("extract/models/biovil.py", "torch.load"): (2, "weights, weights_only=True (model adapters' own rules)"),
    ("extract/models/crossattn/common.py", "torch.load"): (2, "weights: weights_only, or the lenient unpickler "
                                                             "that builds tensors only"),
    ("extract/models/crossattn/common.py", "open"): (1, "the package's own mappings.toml"),
    ("extract/models/crossattn/common.py", "tomllib.load"): (1, "the package's own mappings.toml"),
    ("extract/models/medclip.py", "open"): (1, "the package's own ensemble file"),
    ("extract/models/medclip.py", "tomllib.load"): (1, "the package's own ensemble file"),
    ("extract/models/prompts.py", "open"): (1, "the package's own published prompts"),
    ("extract/models/decoder/common.py", "open"): (1, "the package's own decoder prompts (prompts.toml)"),
    ("extract/models/decoder/common.py", "tomllib.load"): (1, "the package's own decoder prompts (prompts.toml)"),
    ("extract/models/prompts.py", "tomllib.load"): (1, "the package's own published prompts"),
    ("extract/models/openclip.py", "zipfile.ZipFile"): (1, "lists a checkpoint's names (TorchScript or not)"),
    ("extract/models/presets.py", "read_text"): (1, "compares a preset file it writes itself"),
    ("xbench/demo.py", "read_text"): (2, "demo.json this command just wrote"),
}


def _mode(call: ast.Call, pos: int):
    if len(call.args) > pos and isinstance(call.args[pos], ast.Constant):
        return call.args[pos].value
    for k in call.keywords:
        if k.arg == "mode" and isinstance(k.value, ast.Constant):
            return k.value.value
    return "r"


def reads(tree: ast.AST):
    """(line, kind) of every direct file read in ``tree``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            mode = _mode(node, 1)
            if not (isinstance(mode, str) and set(mode) & set("wax")):
                yield node.lineno, "open"
        elif isinstance(f, ast.Attribute):
            if f.attr in ("read_bytes", "read_text") and not node.args:  # pathlib's; the layer's take a path
                yield node.lineno, f.attr
            elif isinstance(f.value, ast.Name) and (f.value.id, f.attr) in _MODULE_READS:
                yield node.lineno, f"{f.value.id}.{f.attr}"
            elif isinstance(f.value, ast.Name) and (f.value.id, f.attr) == ("zipfile", "ZipFile") \
                    and _mode(node, 1) == "r":
                yield node.lineno, "zipfile.ZipFile"


def found() -> dict[tuple[str, str], list[int]]:
    out = collections.defaultdict(list)
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, kind in reads(ast.parse(path.read_text(encoding="utf-8"), rel)):
                out[(rel, kind)].append(line)
    return dict(out)


def test_every_direct_read_is_listed_with_its_reason():
    got = found()
    new = {f"{f}:{lines} {k}" for (f, k), lines in got.items() if len(lines) > ALLOWED.get((f, k), (0,))[0]}
    assert not new, ("direct file reads outside the bounded input layer (schemas/inputs.py); route them through "
                     f"it or list them in ALLOWED with the reason: {sorted(new)}")
    gone = {k for k, (n, _) in ALLOWED.items() if len(got.get(k, [])) < n}
    assert not gone, f"ALLOWED lists more than there is now; lower or drop: {sorted(gone)}"


def test_the_scan_sees_a_direct_read():
    """The check can fail: each kind of read in a snippet is found, writes are not."""
    code = ("import json, zipfile, shutil\nfrom pathlib import Path\n"
            "Path(p).read_bytes()\nopen(p)\nopen(p, 'rb')\njson.load(f)\nzipfile.ZipFile(p)\nshutil.copy(a, b)\n"
            "open(p, 'wb')\nzipfile.ZipFile(buf, 'w')\ninputs.read_bytes(p, max_bytes=1)\n")
    kinds = [k for _, k in reads(ast.parse(code))]
    assert sorted(kinds) == sorted(["read_bytes", "open", "open", "json.load", "zipfile.ZipFile", "shutil.copy"])
