"""The runner tells the adapter which images dataset it extracts before set_classes, so
per-dataset prompt defaults (extract/models/prompts.toml) can apply; the prompts land in the
submission's provenance per dataset."""
from __future__ import annotations

from xbench.extract import runner
from xbench.extract.runner import ExtractOptions, run_extraction
from xbench.schemas import read_submission


def test_runner_sets_dataset_before_set_classes(phantom_images, tmp_path, monkeypatch):
    seen = []
    real = runner.create_adapter

    def recording(*a, **k):
        adapter = real(*a, **k)
        set_classes = adapter.set_classes

        def spy(classes):
            seen.append(adapter.dataset)
            set_classes(classes)

        adapter.set_classes = spy
        adapter.provenance = lambda: {"prompts": {"dataset_seen": adapter.dataset}}
        return adapter

    monkeypatch.setattr(runner, "create_adapter", recording)
    out = tmp_path / "c.zarr"
    run_extraction(ExtractOptions(model="center", images=phantom_images / "images.zarr", out=out, workers=0,
                                  quiet=True, batch_size=8, cases_per_block=8))
    assert seen and set(seen) == {"phantom"}
    assert read_submission(out).attrs["prompts"] == {"phantom": {"dataset_seen": "phantom"}}
