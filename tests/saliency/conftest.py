"""The extraction tests' tiny random models (open_clip folder, transformers CLIP/SigLIP), shared
by loading that conftest under another module name (the tests folders are not packages)."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_extract_fixtures", Path(__file__).parents[1] / "extract" / "conftest.py")
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
tiny_open_clip, tiny_hf = _mod.tiny_open_clip, _mod.tiny_hf
