"""tests/score/ is laid out like score/ (kernels/, metrics/, resampling/, sections/, outputs/, report/; the entry
point, the command and the platforms at the top); the store builders and brute forces its tests share
(``score_stores``, ``score_reference``, ``gaze_stores``, ``docker_run``) stay here, imported by name, as are
the few builders one test module lends another across folders (``test_phrases.make_phrase_stores``): every
folder is on the path, as the flat folder was (test module names are unique across tests/)."""
import sys
from pathlib import Path

HERE = Path(__file__).parent
for folder in [HERE, *sorted(p for p in HERE.iterdir() if p.is_dir() and p.name != "__pycache__")]:
    sys.path.insert(0, str(folder))
