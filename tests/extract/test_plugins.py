"""A plug-in of each kind is one file (plus its test): each test here writes a throw-away one into a temporary
package, lets the registry find it the way it finds the built-in ones (listing the package; or an installed
distribution's entry point), and runs it through the real command. docs/explanation/architecture.md ("Adding a
plug-in") lists the files each kind needs; these tests are its proof."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from xbench.extract.cli import main as extract_main
from xbench.extract.datasets import DATASETS
from xbench.extract.models import MODELS, create_adapter
from xbench.extract.prepare_cli import main as prepare_main
from xbench.extract.saliency import METHODS
from xbench.schemas.augment import AUGMENTATIONS, parse_spec
from xbench.schemas.registry import declared_entries

BIN = Path(sys.executable).parent

READER = '''
    """A throw-away dataset reader: two synthetic cases, one box."""
    import numpy as np

    from xbench.extract.datasets.base import Box, CaseRecord, DatasetReader

    REGISTER = {"throwaway_set": "ThrowawayReader"}


    class ThrowawayReader(DatasetReader):
        key = "throwaway_set"
        classes = ("Pneumonia",)
        splits = ("test",)

        def records(self):
            return [CaseRecord("a", "a", {"Pneumonia": 1}, {"Pneumonia": [Box(4, 4, 20, 20)]}, (32, 32), "a"),
                    CaseRecord("b", "b", {"Pneumonia": 0}, {}, (32, 32), "b")]

        def load_image(self, record):
            return np.zeros(record.orig_size, np.uint8)
    '''

MODEL = '''
    """A throw-away model: the centre baseline under another name."""
    REGISTER = {"throwaway-model": "build"}


    def build(config):
        from xbench.extract.models.baselines import build_center

        return build_center(config)
    '''

METHOD = '''
    """A throw-away map method: minus the raw patch-text similarity."""
    from xbench.extract.saliency import MapMethod


    def run(tower, pixels, text):
        from xbench.extract.saliency.similarity import run as similarity

        pooled, maps = similarity(tower, pixels, text)
        return pooled, -maps


    METHOD = MapMethod(name="throwaway", run=run, description="minus the similarity map", reference="this test")
    '''

AUGMENTATION = '''
    """A throw-away augmentation: invert the grey levels (photometric, one parameter)."""
    import numpy as np

    from xbench.schemas.augment import Augmentation, Param


    def image(img, params, seed):
        return (params["top"] - np.minimum(img.astype(np.int64), params["top"])).astype(np.uint8)


    AUGMENTATION = Augmentation("throwaway_invert", "invert grey levels",
                                params=(Param("top", int, 255, 0, 255, "the level black becomes"),), image=image)
    '''


def _package(root: Path, name: str, files: dict[str, str]) -> Path:
    pkg = root / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for file, text in files.items():
        (pkg / file).write_text(textwrap.dedent(text))
    return pkg


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for mod in [m for m in sys.modules if m.startswith("tp_")]:
        del sys.modules[mod]


def test_a_dataset_reader_is_one_file(plugin_path, monkeypatch):
    pkg = _package(plugin_path, "tp_datasets", {"throwaway.py": READER})
    assert DATASETS.discover("tp_datasets", [str(pkg)], declared="REGISTER") == ["throwaway_set"]
    try:
        res = CliRunner().invoke(prepare_main, ["--list", "--json"])
        assert res.exit_code == 0, res.output
        rows = {r["dataset"]: r for r in json.loads(res.output)["datasets"]}
        assert rows["throwaway_set"]["default_split"] == "test"
        reader = DATASETS.get("throwaway_set")(plugin_path)
        assert [r.case_id for r in reader.records()] == ["a", "b"]
    finally:
        DATASETS.unregister("throwaway_set")


def test_a_model_is_one_file(plugin_path):
    pkg = _package(plugin_path, "tp_models", {"throwaway.py": MODEL})
    assert MODELS.discover("tp_models", [str(pkg)], declared="REGISTER") == ["throwaway-model"]
    try:
        res = CliRunner().invoke(extract_main, ["--list-models"])
        assert res.exit_code == 0, res.output
        assert any(line.startswith("throwaway-model ") for line in res.output.splitlines())
        adapter = create_adapter("throwaway-model", map_size=6)
        assert adapter.map_shape == (6, 6) and adapter.config["name"] == "throwaway-model"
    finally:
        MODELS.unregister("throwaway-model")


def test_a_map_method_is_one_file(plugin_path, phantom_images, tiny_open_clip, tmp_path):
    import torch

    from xbench.schemas import read_submission

    pkg = _package(plugin_path, "tp_methods", {"throwaway.py": METHOD})
    assert METHODS.discover("tp_methods", [str(pkg)], attr="METHOD") == ["throwaway"]
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(f"adapter: open_clip\nmodel: local-dir:{tiny_open_clip}\nweights: random\n")
    try:
        res = CliRunner().invoke(extract_main, ["--list-methods"])
        assert res.exit_code == 0 and any(line.startswith("throwaway ") for line in res.output.splitlines())
        maps = {}
        for method in ("similarity", "throwaway"):
            out = tmp_path / f"{method}.zarr"
            torch.manual_seed(0)  # the same random weights in both runs
            res = CliRunner().invoke(extract_main, [
                "--model", str(cfg), "--images", str(phantom_images / "images.zarr"), "--out", str(out),
                "--method", method, "--workers", "0", "--batch-size", "4", "--limit", "4", "--quiet"])
            assert res.exit_code == 0, res.output
            maps[method] = read_submission(out).datasets["phantom"].saliency[...].astype(np.float64)
        assert maps["similarity"].std() > 0  # the throw-away method really ran: its maps are minus the similarity
        np.testing.assert_allclose(maps["throwaway"], -maps["similarity"], rtol=1e-2, atol=1e-2)
    finally:
        METHODS.unregister("throwaway")


def test_an_augmentation_is_one_file(plugin_path, phantom_images, tmp_path):
    from xbench.schemas import read_submission

    pkg = _package(plugin_path, "tp_augment", {"throwaway_invert.py": AUGMENTATION})
    assert AUGMENTATIONS.discover("tp_augment", [str(pkg)], attr="AUGMENTATION") == ["throwaway_invert"]
    try:
        spec = parse_spec("throwaway_invert:top=200")
        assert str(spec) == "throwaway_invert:top=200"
        assert (spec.apply_image(np.array([[0, 10, 250]], np.uint8), seed=0) == [[200, 190, 0]]).all()
        with pytest.raises(Exception, match="did you mean top"):
            parse_spec("throwaway_invert:tpo=3")
        out = tmp_path / "aug.zarr"
        res = CliRunner().invoke(extract_main, [
            "--model", "dog", "--images", str(phantom_images / "images.zarr"), "--out", str(out),
            "--augment", "throwaway_invert", "--workers", "0", "--limit", "3", "--quiet"])
        assert res.exit_code == 0, res.output
        assert read_submission(out).attrs["augment"]["specs"] == ["throwaway_invert:top=255"]
    finally:
        AUGMENTATIONS.unregister("throwaway_invert")


def test_a_metric_is_one_registered_definition(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "score"))
    try:
        from score_stores import make_gt, make_submission
    finally:
        sys.path.pop(0)
    from xbench.score.metrics.registry import Metric, PairView, registered
    from xbench.score.scoring import score_submission

    def missed(v: PairView) -> np.ndarray:  # the share of pairs whose maximum misses the region
        return 1.0 - v.hit.astype(np.float64)

    make_gt(tmp_path / "gt.zarr")
    make_submission(tmp_path / "sub.zarr", make_gt(tmp_path / "gt2.zarr"), map_shape=(7, 5))
    with registered(Metric("throwaway_miss", "Missed pointing game", "Miss", "grounding", missed)):
        res = score_submission(tmp_path / "sub.zarr", tmp_path / "gt.zarr", bootstrap=0)
    checked = 0
    for dataset in res.metrics["datasets"].values():
        for entry in dataset["classes"].values():
            if entry["pointing_game"] is not None:
                assert entry["throwaway_miss"] == pytest.approx(1.0 - entry["pointing_game"], abs=1e-12)
                checked += 1
    assert checked


def _dist_info(root: Path, groups: dict[str, list[str]]) -> None:
    info = root / "xbench_throwaway_plugins-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: xbench-throwaway-plugins\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text("".join(f"[{g}]\n" + "".join(f"{line}\n" for line in lines) + "\n"
                                                   for g, lines in groups.items()))


def test_installed_plug_ins_of_every_kind_through_entry_points(tmp_path):
    """An installed distribution (a dist-info folder with entry_points.txt on the path) adds a reader, a model,
    a map method, a metric and an augmentation without any file of XBench changing; the real commands list them."""
    _package(tmp_path, "tp_installed", {"reader.py": READER, "model.py": MODEL, "method.py": METHOD,
                                        "augment.py": AUGMENTATION,
                                        "metric.py": '''
        import numpy as np

        from xbench.score.metrics.registry import Metric


        def missed(v):
            return 1.0 - v.hit.astype(np.float64)


        METRIC = Metric("throwaway_miss", "Missed pointing game", "Miss", "grounding", missed)
        '''})
    _dist_info(tmp_path, {"xbench.datasets": ["throwaway_set = tp_installed.reader:ThrowawayReader"],
                          "xbench.models": ["throwaway-model = tp_installed.model:build"],
                          "xbench.methods": ["throwaway = tp_installed.method:METHOD"],
                          "xbench.metrics": ["throwaway = tp_installed.metric:METRIC"],
                          "xbench.augmentations": ["throwaway_invert = tp_installed.augment:AUGMENTATION"]})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}

    def run(*argv: str) -> str:
        out = subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert "throwaway_set" in run(str(BIN / "xbench-prepare"), "--list").split()
    assert any(line.startswith("throwaway-model ") for line in run(str(BIN / "xbench-extract"), "--list-models").splitlines())
    assert any(line.startswith("throwaway ") for line in run(str(BIN / "xbench-extract"), "--list-methods").splitlines())
    keys = run(sys.executable, "-c", "from xbench.score.metrics.registry import REGISTRY; print(' '.join(REGISTRY))").split()
    assert keys[-1] == "throwaway_miss"  # after every built-in metric
    spec = run(sys.executable, "-c", "from xbench.schemas.augment import parse_spec; print(parse_spec('throwaway_invert'))")
    assert spec.strip() == "throwaway_invert:top=255"


def test_a_plug_in_of_the_wrong_kind_is_refused_by_name(tmp_path):
    _package(tmp_path, "tp_wrong", {"notareader.py": "class NotAReader:\n    pass\n"})
    _dist_info(tmp_path, {"xbench.datasets": ["wrong_set = tp_wrong.notareader:NotAReader"]})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([str(BIN / "xbench-prepare"), "wrong_set", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "dataset 'wrong_set'" in out.stderr and "must be a subclass of" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_built_in_names_are_those_of_the_former_central_lists():
    assert DATASETS.names() == ["chestx_det10", "chestxray14", "chexlocalize", "covid_rural", "egd_cxr", "ms_cxr",
                                "phantom", "reflacx", "rsna_pneumonia", "siim_acr", "vindr_cxr"]
    assert MODELS.names() == ["biomedclip", "biovil", "biovil_t", "carzero", "center", "chexagent", "chexzero", "clip",
                              "clip-tiny", "devide", "dog", "gloria", "hf-clip", "hf-siglip", "kad", "llava-rad",
                              "maira-2", "mavl", "medclip", "medgemma", "medklip", "open_clip", "random",
                              "transformers"]  # + issue 45's decoder VLMs
    models = Path(__file__).resolve().parents[2] / "extract" / "models"
    assert declared_entries(models / "hf.py", "REGISTER") == {"transformers": "build", "hf-clip": "build",
                                                              "hf-siglip": "build"}
    assert (models / "preset_configs" / "clip-tiny.toml").is_file()
    assert METHODS.names() == ["attention", "chefer", "clip_surgery", "gem", "gradcam", "maskclip", "rollout",
                               "similarity"]  # attention: issue 45's decoder map
    for name in DATASETS.names():
        assert DATASETS.get(name).key == name
