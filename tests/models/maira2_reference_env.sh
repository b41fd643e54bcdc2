#!/usr/bin/env bash
# The reference interpreter of tests/models/test_maira2_fidelity.py (outside CI, once): a venv with
# transformers 4.51.3 (the version MAIRA-2's remote code runs under) that reuses the worktree venv's other
# packages (torch, safetensors, PIL) through a .pth line, and the authors' three files beside it.
#   tests/models/maira2_reference_env.sh [DIR]     (DIR default .cache/reference/maira-2)
# Then copy configuration_maira2.py, modeling_maira2.py and processing_maira2.py from the hub snapshot of
# microsoft/maira-2 into DIR/maira2/ (with an empty __init__.py) and run the test, with XBENCH_MAIRA2=DIR and
# XBENCH_MAIRA2_PY=DIR/venv/bin/python where DIR is not the default.
set -euo pipefail
dir=${1:-$(cd "$(dirname "$0")/../.." && pwd)/.cache/reference/maira-2}
root=$(cd "$(dirname "$0")/../.." && pwd)
site=$("$root/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
base=$("$root/.venv/bin/python" -c 'import sys; print(sys._base_executable)')
mkdir -p "$dir/maira2"
touch "$dir/maira2/__init__.py"
"$base" -m venv "$dir/venv"
purelib=$("$dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" > "$purelib/zz_xbench.pth"
"$dir/venv/bin/pip" install -q "transformers==4.51.3"
echo "reference interpreter: $dir/venv/bin/python; put the authors' files in $dir/maira2/"
