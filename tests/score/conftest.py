"""tests/score/ is laid out like score/ (kernels/, metrics/, resampling/, sections/, outputs/, report/; the entry
point, the command and the platforms at the top); the store builders and brute forces its tests share
(``score_stores``, ``score_reference``, ``gaze_stores``, ``docker_run``) stay here, imported by name."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
