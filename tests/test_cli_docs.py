"""Every command shown in README.md and docs/**/*.md works as written, so a claim in the docs cannot drift.

Each `xbench...` line of a fenced code block is
1. checked: the command exists and every option it uses is one of that command's options;
2. run, in document order, in a sandbox holding the phantom set under the names the docs use,
   unless it needs something a test cannot have (a dataset download, real weights, GPUs): those
   are listed in NOT_RUN with the reason, and each entry must still match a documented command.
The only rewrite is the phantom's size (REWRITES), so the walk takes seconds, not minutes.
"""
from __future__ import annotations

import glob
import re
import shlex
import shutil
import zipfile
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from xbench import cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PROGRAMS = {"xbench": None, **{f"xbench-{n}": n for n in ("prepare", "extract", "score", "validate", "convert")}}

#: documented command substring -> why the walk cannot run it (the option check still applies)
NOT_RUN = {
    "--root ~/data": "reads a real dataset download",
    "weights=/models/": "needs real CLIP weights",
    "biomedclip.yaml": "needs the BiomedCLIP download and GPUs",
    "medklip.yaml": "needs the MedKLIP checkpoint and its embedding cache",
    "build-embeddings": "needs Bio_ClinicalBERT and the upstream description files",
    "--out /output": "writes to the challenge platform's /output folder",
    "--datasets vindr_cxr,chexlocalize": "names datasets the phantom set does not have",
    "127.0.0.1:8000": "needs a store served over HTTP; tests/schemas/test_remote_hostile.py runs it against one",
    "xbench demo": "takes a minute; tests/score/report/test_report_demo.py runs it (--quick)",
    "suites/robustness.yaml": "about a minute; tests/score/sections/test_robustness_track.py runs it",
    "suites/robustness-tta.yaml": "a minute on the full phantom set; tests/extract/test_augment_extract.py runs it "
                                  "on 6 cases",
    "chexlocalize_test/": "docs/how-to/human.md's worked example runs on a CheXlocalize fixture; "
                          "tests/datasets/test_human.py runs its commands as written",
    "suites/paper.yaml": "needs the seven datasets and the weights; tests/test_suite.py runs its --dry-run on "
                         "fixture roots laid out as the data cards say",
}
#: the one rewrite: the phantom's size
REWRITES = {"--n-cases 200": "--n-cases 12"}


def _logical_lines(text: str) -> list[str]:
    out, buf = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append(buf + line)
        buf = ""
    return out


def documented_commands() -> list[tuple[str, str]]:
    """(doc name, command line without its comment) for every xbench command in a shell code block."""
    found = []
    for doc in DOCS:
        blocks = re.findall(r"```(\w*)\n(.*?)```", doc.read_text(), flags=re.S)
        for lang, body in blocks:
            if lang not in ("", "bash", "sh", "console"):
                continue
            for line in _logical_lines(body):
                line = re.sub(r"\s+#.*$", "", line.strip().removeprefix("$ ")).strip()
                if line.split(" ", 1)[0] in PROGRAMS:
                    found.append((doc.relative_to(ROOT).as_posix(), line))
    return found


COMMANDS = documented_commands()


def _help_texts(cmd: click.Command, path: tuple[str, ...]):
    """(command path, its --help text) for xbench and every command under it, groups included."""
    ctx = click.Context(cmd, info_name=" ".join(path))
    yield path, cmd.get_help(ctx)
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None:
                yield from _help_texts(sub, (*path, name))


def help_examples() -> list[tuple[str, str]]:
    """("xbench COMMAND --help", example line without its comment) for every example in a --help text (the
    description or the epilog after the options): the lines that start with a program name, continuation
    lines joined. An option's wrapped help text (indented past the option names) is left out."""
    found = []
    for path, text in _help_texts(cli.main, ("xbench",)):
        body = [ln.strip() if len(ln) - len(ln.lstrip()) < 12 else "" for ln in text.splitlines()]
        for line in _logical_lines("\n".join(body)):
            line = re.sub(r"\s+#.*$", "", line.strip()).strip()
            if line.split(" ", 1)[0] in PROGRAMS and " " in line:
                found.append((f"{' '.join(path)} --help", line))
    return found


HELP_EXAMPLES = help_examples()
#: --help example substring -> why the help walk cannot run it (the option check still applies; beside NOT_RUN)
HELP_NOT_RUN = {
    "...": "a fragment of a command (`xbench-extract ... --nproc-per-node 4`)",
    "--root ": "reads a real dataset download",
    "--text-encoder ~/models": "needs Bio_ClinicalBERT and the upstream description files",
    "--root CheXlocalize/": "reads the CheXlocalize download",
    "--human human/": "needs `xbench human`'s output; docs/how-to/human.md's walk and tests/datasets/test_human.py run it",
    "--faithfulness round2-sub.zarr": "needs the round-2 pair `xbench perturb` + `--scores-only` write; "
                                      "docs/how-to/faithfulness.md's walk runs the sequence",
    "--images round2.zarr": "needs `xbench perturb`'s output; docs/how-to/faithfulness.md's walk runs the sequence",
    "--faithfulness faith/": "both faithfulness rounds: about a minute; tests/extract/test_faithfulness_flow.py",
    "suites/demo.yaml": "the demo suite: tests/score/report/test_report_demo.py runs it",
    "suites/paper.yaml --limit": "needs the seven datasets and the weights",
    "suites/paper.yaml --only": "needs the seven datasets and the weights",
    "sanity --model clip-tiny": "the randomisation test: tests/extract/test_sanity.py runs it",
    "--by sex,view": "needs case attributes in the ground truth; docs/how-to/score.md's walk runs --by on the phantom's",
}
#: the help walk's rewrites: the phantom's size (the sandbox's data/ is the 12-case set already)
HELP_REWRITES = {"--n-cases 200": "--n-cases 12", "xbench prepare phantom --out data/": "xbench prepare phantom "
                 "--out data_flow/ --n-cases 12"}


def _argv(line: str) -> list[str]:
    """`xbench-score ...` and `xbench score ...` as the umbrella's argv."""
    tokens = shlex.split(line)
    sub = PROGRAMS[tokens[0]]
    return tokens[1:] if sub is None else [sub, *tokens[1:]]


def _command(argv: list[str]) -> click.Command:
    ctx = click.Context(cli.main)
    cmd = cli.main.get_command(ctx, argv[0])
    assert cmd is not None, f"no command 'xbench {argv[0]}'"
    return cmd


def _skip_reason(line: str) -> str | None:
    return next((why for key, why in NOT_RUN.items() if key in line), None)


def test_the_docs_show_commands():
    docs = {doc for doc, _ in COMMANDS}
    assert {"README.md", "docs/how-to/prepare.md", "docs/how-to/extract.md", "docs/how-to/score.md", "docs/how-to/report.md"} <= docs
    assert len(COMMANDS) >= 25


@pytest.mark.parametrize("doc,line", COMMANDS, ids=[f"{d}:{c[:60]}" for d, c in COMMANDS])
def test_documented_options_exist(doc, line):
    argv = _argv(line)
    cmd, words = _command(argv), 1
    while isinstance(cmd, click.Group) and words < len(argv) and argv[words] in cmd.commands:
        cmd, words = cmd.commands[argv[words]], words + 1  # xbench package codabench: the leaf's options
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
    used = {t.split("=", 1)[0] for t in argv[words:] if t.startswith("-") and t != "-" and not t[1:].isdigit()}
    unknown = sorted(used - known)
    assert not unknown, f"{doc}: `{line}` uses {unknown}, which `xbench {' '.join(argv[:words])}` does not have"


def test_every_not_run_entry_is_still_documented():
    for key in NOT_RUN:
        assert any(key in line for _, line in COMMANDS), f"NOT_RUN[{key!r}] matches no documented command any more"


# -- the walk ------------------------------------------------------------------------------------------
def _xb(argv: list[str]):
    return CliRunner().invoke(cli.main, argv)


def _zip_contents(store: Path, dst: Path) -> None:
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zf:
        for p in sorted(store.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(store).as_posix())


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """Every input the docs name that no runnable documented command makes: the phantom set under
    each documented name, submissions of several models, score folders, zipped stores."""
    d = tmp_path_factory.mktemp("docs-sandbox")
    ok = lambda res: res.exit_code == 0 or pytest.fail(res.output)  # noqa: E731
    ok(_xb(["prepare", "phantom", "--out", str(d / "data"), "--n-cases", "12", "-q"]))
    for name in ("images.zarr", "gt.zarr"):
        shutil.copytree(d / "data" / name, d / name)
    shutil.copytree(d / "gt.zarr", d / "gt_test.zarr")
    for model, outs in {"dog": ("dog", "c", "sub", "submission", "test"), "random": ("random", "a"),
                        "center": ("b",), "clip-tiny": ("clip",)}.items():
        first = d / f"{outs[0]}.zarr"
        ok(_xb(["extract", "--model", model, "--images", str(d / "data/images.zarr"), "--out", str(first),
                "--workers", "0", "-q"]))
        for other in outs[1:]:
            shutil.copytree(first, d / f"{other}.zarr")
    for name in ("sub", "submission"):
        _zip_contents(d / f"{name}.zarr", d / f"{name}.zarr.zip")
    for model in ("clip", "dog", "random"):
        ok(_xb(["score", str(d / f"{model}.zarr"), "--gt", str(d / "gt.zarr"), "--out", str(d / "scores" / model),
                "--bootstrap", "0", "-q"]))
    shutil.copytree(d / "scores/dog", d / "results_val")
    (d / "subs").mkdir()
    shutil.copytree(d / "clip.zarr", d / "subs/clip.zarr")
    (d / "npz_outputs").mkdir()  # xbench-convert's folder layout (filled below)
    shutil.copytree(ROOT / "suites", d / "suites")  # the shipped suites, named from the repository root
    return d


def _npz_folder(sandbox: Path) -> None:
    """`npz_outputs/` and `outputs.h5`, the two layouts xbench-convert reads, from dog.zarr."""
    import json

    import h5py
    import numpy as np

    from xbench.schemas import read_submission

    sub = read_submission(sandbox / "dog.zarr")
    meta = {"model": "dog", "method": "dog", "datasets": {}}
    with h5py.File(sandbox / "outputs.h5", "w") as h5:
        h5.attrs["model"], h5.attrs["method"] = "dog", "dog"
        for name, ds in sub.datasets.items():
            meta["datasets"][name] = {"classes": list(ds.classes), "score_kind": ds.score_kind}
            sal = np.asarray(ds.saliency[...], dtype=np.float32)
            g = h5.create_group(name)
            g.attrs["classes"], g.attrs["score_kind"] = list(ds.classes), ds.score_kind
            g["case_id"] = np.asarray([str(c) for c in ds.case_id], dtype="S")
            g["scores"], g["saliency"] = ds.scores, sal
            (sandbox / "npz_outputs" / name).mkdir(parents=True, exist_ok=True)
            for i, case in enumerate(ds.case_id):
                np.savez(sandbox / "npz_outputs" / name / f"{case}.npz", scores=ds.scores[i], saliency=sal[i])
    (sandbox / "npz_outputs" / "meta.json").write_text(json.dumps(meta))
    _marks_files(sandbox)


def _marks_files(sandbox: Path) -> None:
    """docs/how-to/convert.md's inputs on the phantom: a COCO results file, its categories.toml, a marks JSON and model
    answers (JSONL)."""
    import json

    from xbench.schemas import read_images

    ds = read_images(sandbox / "images.zarr").datasets["phantom"]
    ids = [str(c) for c in ds.case_id]
    results = [{"image_id": c, "category_id": 4 + k % 2, "bbox": [10.0 + k, 20.0, 30.0, 25.5], "score": 0.5 + k / 50}
               for k, c in enumerate(ids)] + [{"image_id": ids[0], "category_id": 9, "bbox": [0, 0, 5, 5], "score": 0.1}]
    (sandbox / "detections.json").write_text(json.dumps(results))
    (sandbox / "categories.toml").write_text('model = "my-detector"\n[categories]\n4 = "Nodule"\n'
                                             '5 = "Pleural effusion"\n9 = ""\n')
    answers = {"model": "my-mllm", "coordinates": "normalised", "unsupported": ["Pneumothorax"],
               "datasets": {"phantom": {ids[1]: {"nodule": {"points": [[0.41, 0.33, 0.8]]},
                                                  "Pleural effusion": {"boxes": [[0.05, 0.6, 0.3, 0.3]], "score": 0.7}}}}}
    (sandbox / "answers.json").write_text(json.dumps(answers))
    # docs/how-to/convert.md, "A model's own boxes": a generative model's answers in CheXagent's and MAIRA-2's formats
    rows = [{"case_id": c, "finding": "Nodule", "text": f"<|ref|>nodule<|/ref|><|box|>({10 + k},20),(55,48)<|/box|>"}
            for k, c in enumerate(ids[:6])] + [{"case_id": ids[6], "finding": "Nodule", "text": "No nodule."}]
    (sandbox / "answers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rows = [{"case_id": c, "finding": "Pleural effusion", "text": f"<obj>Effusion<box><x{k}><y60><x40><y90></box></obj>"}
            for k, c in enumerate(ids[:6])]
    (sandbox / "maira2_answers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _mask_files(sandbox, ds)


def _mask_files(sandbox: Path, ds) -> None:
    """docs/how-to/convert.md's masks on the phantom: COCO segmentations (RLE and a polygon) and a folder of PNG masks."""
    import json

    import numpy as np
    from PIL import Image

    ids = [str(c) for c in ds.case_id]
    results, png = [], sandbox / "png_masks"
    for k, c in enumerate(ids[:6]):
        h, w = (int(v) for v in ds.orig_size[k])
        m = np.zeros((h, w), bool)
        m[h // 4: h // 2, w // 3: w // 2] = True
        flat = m.T.ravel()
        edges = np.flatnonzero(np.diff(np.r_[False, flat, False].astype(np.int8))) if flat.any() else []
        runs = np.diff(np.r_[0, edges, flat.size]).tolist()
        results.append({"image_id": c, "category_id": 4, "score": 0.6, "segmentation": {"size": [h, w], "counts": runs}})
        results.append({"image_id": c, "category_id": 5, "score": 0.3,
                        "segmentation": [[w * 0.1, h * 0.6, w * 0.4, h * 0.6, w * 0.4, h * 0.9, w * 0.1, h * 0.9]]})
        (png / "phantom" / c).mkdir(parents=True)
        Image.fromarray(m).save(png / "phantom" / c / "Nodule.png")
    (sandbox / "segmentations.json").write_text(json.dumps(results))
    (png / "masks.json").write_text(json.dumps({"model": "my-seg-vlm", "scores": {"phantom": {ids[0]: {"Nodule": 0.9}}}}))


#: pages another test runs as written, each from an empty folder with its Python blocks (the option check above
#: still applies to them): the tutorials, tests/test_getting_started.py
RUN_ELSEWHERE = "docs/tutorials/"


@pytest.mark.slow
@pytest.mark.parametrize("doc", sorted({d for d, _ in COMMANDS if not d.startswith(RUN_ELSEWHERE)}))
def test_documented_commands_run_as_written(doc, template, tmp_path, monkeypatch):
    sandbox = tmp_path / "sandbox"
    shutil.copytree(template, sandbox, symlinks=True)
    _npz_folder(sandbox)
    monkeypatch.chdir(sandbox)
    ran = 0
    for d, line in COMMANDS:
        if d != doc or _skip_reason(line):
            continue
        for key, value in REWRITES.items():
            line = line.replace(key, value)
        argv = [m for t in _argv(line) for m in (sorted(glob.glob(t)) if "*" in t else [t])]
        res = _xb(argv)
        assert res.exit_code == 0, f"{doc}: `{line}` exited {res.exit_code}:\n{res.output}"
        assert "Traceback" not in res.output
        ran += 1
    assert ran, f"{doc}: nothing ran"


# -- the examples of every --help text (issue 35: `xbench --help`'s report example had drifted) -----------------
def test_every_help_example_is_collected():
    commands = {where for where, _ in HELP_EXAMPLES}
    assert {"xbench --help", "xbench score --help", "xbench report --help", "xbench extract --help",
            "xbench package codabench --help"} <= commands
    assert len(HELP_EXAMPLES) >= 40
    assert ("xbench --help", "xbench report results/ --out report/") in HELP_EXAMPLES


@pytest.mark.parametrize("where,line", HELP_EXAMPLES, ids=[f"{w}:{c[:60]}" for w, c in HELP_EXAMPLES])
def test_help_example_options_exist(where, line):
    test_documented_options_exist(where, line)


def test_every_help_not_run_entry_is_still_an_example():
    for key in HELP_NOT_RUN:
        assert any(key in line for _, line in HELP_EXAMPLES), f"HELP_NOT_RUN[{key!r}] matches no example any more"


def _help_skip_reason(line: str) -> str | None:
    return next((why for key, why in HELP_NOT_RUN.items() if key in line), None) or _skip_reason(line)


@pytest.mark.slow
@pytest.mark.parametrize("where", sorted({w for w, line in HELP_EXAMPLES if not _help_skip_reason(line)}))
def test_help_examples_run_as_written(where, template, tmp_path, monkeypatch):
    """Each command's examples, in order, in a sandbox of their own holding the names the docs' walk uses."""
    sandbox = tmp_path / "sandbox"
    shutil.copytree(template, sandbox, symlinks=True)
    _npz_folder(sandbox)
    shutil.copytree(sandbox / "dog.zarr", sandbox / "smoke.zarr")  # xbench score's --allow-missing example
    monkeypatch.chdir(sandbox)
    for w, line in HELP_EXAMPLES:
        if w != where or _help_skip_reason(line):
            continue
        for key, value in {**REWRITES, **HELP_REWRITES}.items():
            line = line.replace(key, value)
        argv = [m for t in _argv(line) for m in (sorted(glob.glob(t)) if "*" in t else [t])]
        out = argv[argv.index("--out") + 1] if "--out" in argv[:-1] else None
        # Examples are alternatives that may build on each other's outputs, never on their own: each writes
        # its --out (and perturb's key beside it) anew, as on a fresh machine.
        for stale in ([Path(out), Path(out.rstrip("/")).with_suffix(".key.npz")] if out else []):
            if stale.is_dir():
                shutil.rmtree(stale)
            elif stale.exists():
                stale.unlink()
        res = _xb(argv)
        assert res.exit_code == 0, f"{where}: `{line}` exited {res.exit_code}:\n{res.output}"
        assert "Traceback" not in res.output
