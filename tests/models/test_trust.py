"""A checkpoint runs nothing from its pickle unless trust is the boolean ``true`` (issue 25).

The payload is a pickled call that creates a marker file: with trust unset, ``false``, or any string
(``"false"``, ``"true"``, ``"yes"``) the marker must not appear and the run ends in one line that says how
to trust the file; with the boolean ``true`` the marker appears (so these tests can see a payload run)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

torch = pytest.importorskip("torch")

from xbench.extract.models import create_adapter  # noqa: E402
from xbench.extract.models.crossattn.common import AdapterConfigError, read_checkpoint, trust_option  # noqa: E402
from xbench.schemas.errors import InputError  # noqa: E402

ADAPTERS = ("medklip", "mavl", "kad", "carzero", "devide")


class _Payload:
    """Pickles as a call of ``open(marker, "w")``: unpickling it creates the marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _payload_checkpoint(tmp_path, name="payload.pth"):
    marker = tmp_path / f"{name}.RAN"
    path = tmp_path / name
    torch.save({"state_dict": {"w": torch.zeros(1)}, "hyper_parameters": _Payload(str(marker))}, path)
    return path, marker


def test_read_checkpoint_runs_the_payload_only_with_trust_true(tmp_path):
    path, marker = _payload_checkpoint(tmp_path)
    with pytest.raises(AdapterConfigError, match=r"weights_only=True.*would run code.*trust_checkpoint: true"):
        read_checkpoint(path)
    for not_a_bool in ("true", "false", 1, "yes", None):
        with pytest.raises(AdapterConfigError):
            read_checkpoint(path, trust=not_a_bool)
    assert not marker.exists()
    read_checkpoint(path, trust=True)
    assert marker.exists()  # the payload does run when trusted: the checks above would have seen it


@pytest.mark.parametrize("value, trusted", [(True, True), (False, False), (None, False)])
def test_trust_option_booleans(value, trusted):
    assert trust_option({"options": {"trust_checkpoint": value}}) is trusted
    assert trust_option({}) is False


@pytest.mark.parametrize("value", ["false", "true", "yes", "0", 1, 0, 1.0, [True], {"a": 1}])
def test_trust_option_refuses_anything_but_a_boolean(value):
    with pytest.raises(AdapterConfigError, match="must be the boolean true or false"):
        trust_option({"options": {"trust_checkpoint": value}})
    with pytest.raises(AdapterConfigError, match="must be the boolean true or false"):
        trust_option({"trust_checkpoint": value})  # read at the top level too


@pytest.mark.parametrize("model", ADAPTERS)
@pytest.mark.parametrize("trust", ["unset", "false", "true-string"])
def test_each_crossattn_adapter_refuses_the_payload(model, trust, tmp_path, tiny_bert, tiny_cache, tiny_config):
    path, marker = _payload_checkpoint(tmp_path)
    cfg = tiny_config(model, tiny_bert, tiny_cache)
    cfg["weights"] = str(path)
    if trust != "unset":
        cfg["options"] = {**cfg.get("options", {}), "trust_checkpoint": "false" if trust == "false" else "true"}
    with pytest.raises(InputError, match="trust_checkpoint"):
        create_adapter(model, **cfg)
    assert not marker.exists()


def test_gloria_refuses_the_payload(tmp_path, tiny_bert):
    path, marker = _payload_checkpoint(tmp_path, "chexpert_resnet50.ckpt")
    for options in ({}, {"trust_checkpoint": "false"}, {"trust_checkpoint": "true"}):
        with pytest.raises(InputError, match="trust_checkpoint"):
            create_adapter("gloria", weights=str(path), text_encoder=str(tiny_bert), device="cpu",
                           options={"resnet_layers": [1, 1, 1, 1], **options})
    assert not marker.exists()


def _phantom(tmp_path):
    from xbench.extract.datasets.phantom import PhantomReader
    from xbench.extract.datasets.prepare import prepare_dataset

    prepare_dataset(PhantomReader(n_cases=2, size=64), tmp_path / "ph", grid=(32, 32), image_size=64, workers=1,
                    cases_per_block=2, progress=False)
    return tmp_path / "ph" / "images.zarr"


@pytest.mark.parametrize("trust", ["unset", "string"])
def test_xbench_extract_refuses_the_payload_in_one_line(trust, tmp_path, tiny_bert, tiny_cache, tiny_config):
    path, marker = _payload_checkpoint(tmp_path)
    cfg = {"adapter": "kad", **tiny_config("kad", tiny_bert, tiny_cache)}
    cfg["weights"] = str(path)
    if trust == "string":
        cfg["options"]["trust_checkpoint"] = "false"
    (tmp_path / "kad.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "kad.zarr"
    proc = subprocess.run([sys.executable, "-m", "xbench.extract.cli", "--model", str(tmp_path / "kad.yaml"),
                           "--images", str(_phantom(tmp_path)), "--out", str(out), "--workers", "0", "--quiet"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "XBENCH_DEBUG": ""})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and "trust_checkpoint: true" in lines[0] and "Traceback" not in proc.stderr, lines
    assert not marker.exists() and not out.exists()
