"""Round 2's cost said before the work starts (issue 35 item 6): `xbench perturb` prints the number of images and
an estimated size on disk before the first image is written, and with --limit the whole run extrapolated.

Checked against independent counts: the images the run wrote (its store's rows), the bytes it wrote (a walk of
the folder), and the image count of the full run made afterwards."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest
from click.testing import CliRunner

from xbench.schemas.images import ImagesWriter
from xbench.schemas.round2_cost import cost_line, human_bytes
from xbench.schemas.submission import DatasetSpec, SubmissionWriter

S, G, N = 64, 8, 12
CLASSES = ["A", "B", "C"]


def _du(path) -> int:
    """Bytes on disk, as `du` counts them: the blocks of every file and folder."""
    return sum(os.lstat(os.path.join(r, x)).st_blocks * 512 for r, ds, fs in os.walk(path) for x in (*ds, *fs))


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("cost")
    rng = np.random.default_rng(0)
    # smooth images with some texture (an X-ray compresses somewhat; pure noise would not at all)
    yy, xx = np.mgrid[:S, :S]
    imgs = np.stack([(128 + 60 * np.sin(xx / (3 + i)) * np.cos(yy / 5) + rng.normal(0, 8, (S, S))).clip(0, 255)
                     for i in range(N)]).astype(np.uint8)
    w = ImagesWriter(d / "images.zarr", "phantom", case_ids=[f"case{i:02d}" for i in range(N)], classes=CLASSES,
                     image_size=S, cases_per_block=4)
    for b in w.blocks_todo():
        s, e = w.block_rows(b)
        w.write_block(b, imgs[s:e], np.full((e - s, 2), 100))
    w.finish()
    maps = rng.random((N, len(CLASSES), G, G)).astype(np.float32)
    sub = SubmissionWriter.create(d / "sub.zarr", model="m", method="t", datasets={
        "phantom": DatasetSpec([f"case{i:02d}" for i in range(N)], CLASSES, (G, G), "probability")}, cases_per_block=16)
    sub.write_block("phantom", 0, np.full((N, len(CLASSES)), 0.5), maps)
    sub.finish()
    return d


def _perturb(d, out, *extra):
    from xbench import cli

    return CliRunner().invoke(cli.main, ["perturb", str(d / "sub.zarr"), "--images", str(d / "images.zarr"),
                                         "--out", str(d / out), "--key", str(d / f"{out}.key.npz"), "--steps", "4",
                                         "--grid", str(G), *map(str, extra)])


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _bytes(text: str) -> float:
    v, unit = text.split()
    return float(v) * {"GB": 1e9, "MB": 1e6, "kB": 1e3, "B": 1}[unit]


def test_perturb_prints_the_images_and_size_before_writing(stores):
    res = _perturb(stores, "full.zarr")
    assert res.exit_code == 0, res.output
    m = re.search(r"round 2: ([\d,]+) images for ([\d,]+) case\(s\), about ([\d.]+ [kMG]?B) on disk", res.stderr)
    assert m, res.stderr
    from xbench.schemas import read_images

    written = len(read_images(stores / "full.zarr").datasets["phantom"].case_id)
    assert _number(m.group(1)) == written and _number(m.group(2)) == N
    # 3 shared images per case (the original, deletion's all-fill end, insertion's RISE-blurred start) + for every
    # case x class pair (K - 1) per order of deletion and insertion
    assert written == 3 * N + N * len(CLASSES) * 2 * 2 * (4 - 1)
    est, actual = _bytes(m.group(3)), _du(stores / "full.zarr")
    assert actual <= est <= 3 * actual, (est, actual)  # errs high, within a factor 3 of what was written
    assert res.stderr.index("round 2:") < res.output.index("wrote ")  # said before the summary of the work


def test_limit_extrapolates_to_the_full_run(stores):
    res = _perturb(stores, "small.zarr", "--limit", "3")
    assert res.exit_code == 0, res.output
    m = re.search(r"round 2: ([\d,]+) images for 3 case\(s\).*all 12 cases would make about ([\d,]+) images, "
                  r"([\d.]+ [kMG]?B)", res.stderr)
    assert m, res.stderr
    full = _perturb(stores, "full2.zarr")
    n_full = _number(re.search(r"round 2: ([\d,]+) images", full.stderr).group(1))
    assert _number(m.group(2)) == n_full  # without --gt every case has the same pairs: exact
    assert _number(m.group(1)) * 4 == n_full


def test_quiet_and_json_print_no_cost_line(stores):
    res = _perturb(stores, "q.zarr", "--quiet")
    assert res.exit_code == 0 and "round 2:" not in res.output


@pytest.mark.parametrize("n,text", [(999, "999 B"), (12_345, "12 kB"), (1_234, "1.2 kB"), (574e6, "574 MB"), (1.5e9, "1.5 GB")])
def test_human_bytes(n, text):
    assert human_bytes(n) == text


def test_cost_line_by_hand():
    line = cost_line(100, 1000.0, 10, 40)
    assert "100 images for 10 case(s)" in line and f"about {human_bytes(100 * (4096 + 5 * 4096))}" in line
    assert "all 40 cases would make about 400 images" in line
    assert "would make" not in cost_line(100, 1000.0, 40, 40)


def test_extract_faithfulness_prints_the_cost_line(tmp_path):
    """xbench-extract --faithfulness (both rounds in one go) says the cost before round 2 is written."""
    pytest.importorskip("torch")
    from xbench import cli

    inv = lambda *a: CliRunner().invoke(cli.main, [str(x) for x in a])  # noqa: E731
    assert inv("prepare", "phantom", "--out", tmp_path / "data", "--n-cases", "6", "--image-size", "64",
               "-q").exit_code == 0
    res = inv("extract", "--model", "dog", "--images", tmp_path / "data/images.zarr", "--out", tmp_path / "d.zarr",
              "--workers", "0", "--faithfulness", tmp_path / "faith", "--faithfulness-steps", "2", "--limit", "2")
    assert res.exit_code == 0, res.output
    m = re.search(r"round 2: ([\d,]+) images for 2 case\(s\), about .* on disk.*all 6 cases would make about", res.stderr)
    assert m, res.stderr
    from xbench.schemas import read_images

    assert _number(m.group(1)) == len(read_images(tmp_path / "faith/round2.zarr").datasets["phantom"].case_id)
