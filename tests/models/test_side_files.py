"""Files the model side reads from users' folders go through the bounded readers (issue 25): the MedKLIP/MAVL
query cache (npz: members checked before inflating, no pickles), open_clip / transformers / CXR-BERT config
JSONs (size, depth, duplicate keys), BERT vocabularies (regular files, bounded, UTF-8). Each hostile file is
one problem line (an InputError), never a Python error or an unbounded read."""
from __future__ import annotations

import io
import os
import sys
import time
import zipfile

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

from xbench.extract.models.crossattn.cache import QueryCache, read_query_cache, write_query_cache  # noqa: E402
from xbench.schemas.errors import InputError  # noqa: E402


def _npz(path, members: dict) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name + ".npy", data)


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=True)
    return buf.getvalue()


def _zero_bomb(path, mib: int) -> None:
    """An npz whose disease_book inflates to ``mib`` MiB of zeros (a few hundred KiB on disk)."""
    n = mib * 2**20 // 4
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("entities.npy", _npy(np.array(["a"])))
        with zf.open("disease_book.npy", "w", force_zip64=True) as fh:
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1, n)})
            fh.write(header.getvalue())
            chunk = bytes(2**20)
            for _ in range(mib):
                fh.write(chunk)


def test_cache_zip_bomb_is_refused_before_inflating(tmp_path):
    path = tmp_path / "bomb.npz"
    _zero_bomb(path, 300)
    assert path.stat().st_size < 2 * 2**20
    t0 = time.monotonic()
    with pytest.raises(InputError, match="would inflate to more than 256.0 MiB"):
        read_query_cache(path)
    assert time.monotonic() - t0 < 5


def test_cache_with_pickled_objects_is_refused(tmp_path):
    path = tmp_path / "pickled.npz"
    _npz(path, {"entities": _npy(np.array(["a"])), "disease_book": _npy(np.array([{"x": 1}], dtype=object))})
    with pytest.raises(InputError, match="holds Python objects"):
        read_query_cache(path)


def test_cache_of_the_wrong_shape_or_types_is_one_line(tmp_path):
    path = tmp_path / "texts.npz"
    _npz(path, {"entities": _npy(np.array(["a"])), "disease_book": _npy(np.array([["x"]]))})
    with pytest.raises(InputError, match="entities must be text and the embeddings numbers"):
        read_query_cache(path)
    _npz(path, {"entities": _npy(np.array(["a"]))})
    with pytest.raises(InputError, match="no array disease_book"):
        read_query_cache(path)
    meta = np.asarray('{"version": 2, "version": 3}')
    _npz(path, {"entities": _npy(np.array(["a"])), "disease_book": _npy(np.zeros((1, 4), "f4")), "meta": _npy(meta)})
    with pytest.raises(InputError, match="twice"):
        read_query_cache(path)


def test_a_written_cache_still_reads(tmp_path):
    path = tmp_path / "ok.npz"
    from xbench.extract.models.crossattn.entities import ENTITIES

    book = np.arange(len(ENTITIES) * 4, dtype="f4").reshape(len(ENTITIES), 4)
    write_query_cache(QueryCache(ENTITIES, book, None, (), {"test": True}), path)
    got = read_query_cache(path)
    assert got.entities == tuple(ENTITIES) and np.array_equal(got.disease_book, book)


def test_open_clip_config_json_is_bounded(tmp_path):
    pytest.importorskip("open_clip")
    from xbench.extract.models.openclip import resolve

    folder = tmp_path / "m"
    folder.mkdir()
    for text, message in [('{"model_cfg": {}, "model_cfg": {}}', "twice"),
                          ('{"model_cfg": ' + "[" * 5000 + "]" * 5000 + "}", "levels deep"),
                          ('{"model_cfg": {"embed_dim": 1e999}}', "too large for a 64-bit float"),
                          ('{"model_cfg": [1]}', "no 'model_cfg'")]:
        (folder / "open_clip_config.json").write_text(text)
        with pytest.raises(InputError, match=message):
            resolve({"model": f"local-dir:{folder}", "weights": "random"})


def test_transformers_config_json_is_bounded(tmp_path):
    pytest.importorskip("transformers")
    from xbench.extract.models.hf import load_model

    (tmp_path / "config.json").write_text('{"model_type": "clip", "model_type": "bert"}')
    with pytest.raises(InputError, match="has the key 'model_type' twice"):
        load_model({"model": str(tmp_path), "weights": "random"})
    (tmp_path / "config.json").write_text('{"model_type": "clip", "x": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(InputError, match="levels deep"):
        load_model({"model": str(tmp_path), "weights": "random"})


def test_cxr_bert_config_is_bounded(tmp_path):
    from xbench.extract.models.biovil import load_text_model

    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    (tmp_path / "config.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(InputError, match="is not UTF-8"):
        load_text_model(tmp_path)
    (tmp_path / "config.json").write_text('{"projection_size": "big"}')
    with pytest.raises(InputError, match="CXR-BERT text model config"):
        load_text_model(tmp_path)


def test_vocabulary_is_a_bounded_regular_file(tmp_path):
    from xbench.extract.models.crossattn.bert_tokenize import read_vocab

    (tmp_path / "vocab.txt").write_bytes(b"[PAD]\r\n[UNK]\n\nthere\n")
    assert read_vocab(tmp_path / "vocab.txt") == {"[PAD]": 0, "[UNK]": 1, "": 2, "there": 3}
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        read_vocab(fifo)
    (tmp_path / "bad.txt").write_bytes(b"ok\n\xff\n")
    with pytest.raises(InputError, match="not UTF-8"):
        read_vocab(tmp_path / "bad.txt")


def test_xbench_extract_refuses_a_cache_bomb_within_budget(tmp_path, tiny_bert, tiny_cache, tiny_config):
    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset

    bomb = tmp_path / "bomb.npz"
    _zero_bomb(bomb, 300)
    cfg = {"adapter": "medklip", **tiny_config("medklip", tiny_bert, tiny_cache), "embeddings_cache": str(bomb)}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(cfg))
    prepare_dataset(PhantomReader(n_cases=2, size=64), tmp_path / "ph", grid=(32, 32), image_size=64, workers=1,
                    cases_per_block=2, progress=False)
    cli_run = _cli_run()
    run = cli_run.run_extract(["--model", tmp_path / "m.yaml", "--images", tmp_path / "ph" / "images.zarr",
                               "--out", tmp_path / "o.zarr", "--workers", "0", "--quiet"], tmp_path, cap_s=60)
    assert run.rc == 2, run.stderr[-2000:]
    assert run.seconds < 60 and run.maxrss_mib < 1024, (run.seconds, run.maxrss_mib)
    assert "would inflate to more than 256.0 MiB" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "o.zarr").exists()


def _cli_run():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "extract" / "cli_run.py"
    spec = importlib.util.spec_from_file_location("extract_cli_run", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_text_encoder_folder_json_is_bounded(tmp_path):
    pytest.importorskip("transformers")
    from xbench.extract.models.crossattn.common import build_bert_from_config, load_tokenizer

    (tmp_path / "config.json").write_text('{"model_type": "bert", "hidden_size": 32, "hidden_size": 64}')
    with pytest.raises(InputError, match="text encoder: .*config.json: has the key 'hidden_size' twice"):
        build_bert_from_config(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    (tmp_path / "tokenizer_config.json").write_text("[" * 1000 + "]" * 1000)
    with pytest.raises(InputError, match="tokenizer: .*tokenizer_config.json: nests 1000 levels deep"):
        load_tokenizer(tmp_path)
