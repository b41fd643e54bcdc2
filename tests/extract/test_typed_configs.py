"""Each adapter declares a typed config (a frozen dataclass in extract/models/catalog.py): its fields are the keys
the adapter reads, the checks derive from them, and a key it does not read is refused with the close ones, by
the CLI and by create_adapter alike."""
from __future__ import annotations

import dataclasses

import pytest

from xbench.extract.models import catalog, create_adapter
from xbench.extract.models.checks import typed_config
from xbench.extract.models.errors import ModelConfigError


@pytest.mark.parametrize("name", sorted(catalog.MODELS))
def test_every_model_has_a_frozen_typed_config(name):
    info = catalog.MODELS[name]
    for cls in (info.config, info.options_config):
        if cls is not None:
            assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert catalog.COMMON_KEYS <= catalog.field_names(info.config)
    assert info.keys == catalog.field_names(info.config) - catalog.COMMON_KEYS
    assert ("options" in info.keys) == bool(info.options)  # options: read only by models that declare them


def test_a_typed_config_holds_the_values_and_is_frozen():
    typed = typed_config({"adapter": "center", "sigma": 2.5, "map_size": [4, 6]})
    assert isinstance(typed, catalog.CenterConfig) and typed.sigma == 2.5 and typed.map_size == [4, 6]
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.sigma = 1
    assert typed_config({"adapter": "some.plugin:build", "anything": 1}) is None  # a plug-in checks its own


def test_create_adapter_refuses_an_unknown_key_with_the_close_one():
    with pytest.raises(ModelConfigError, match="center reads no key 'sigm'. Did you mean: sigma?"):
        create_adapter("center", sigm=3)
    with pytest.raises(ModelConfigError, match=r"medklip reads no options.hash_weight\. Did you mean: hash_weights"):
        create_adapter("medklip", options={"hash_weight": True})
    assert create_adapter("center", sigma=3, map_size=5).map_shape == (5, 5)


def test_model_naming_the_adapter_is_not_an_unknown_key():
    """``model: dog`` without ``adapter:`` names the adapter (load_config); it is no key of the baseline's."""
    assert isinstance(typed_config({"adapter": "dog", "model": "dog", "sigma": 2}), catalog.DoGConfig)
    with pytest.raises(ModelConfigError, match="dog reads no key 'model'"):
        typed_config({"adapter": "dog", "model": "center"})
