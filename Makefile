# The two set-up commands of the README: `make demo` and `make test`. Each creates the virtual
# environment on first use, so a fresh clone needs nothing else. `make demo` installs no torch: the scorer and the
# `demo` extra, then the demo on the weight-free baselines; `make demo-models` (opt-in) adds torch and the
# untrained clip-tiny; `make install` (test, lint) upgrades the same venv to the full one (its own marker file).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_OUT ?= demo-out
# Torch is installed at the exact build in constraints/torch.txt (a CUDA build that also runs on
# CPU); pyproject.toml only bounds it, so a GPU machine may bring its own build.
PIP_INSTALL := $(BIN)/python -m pip install -q --disable-pip-version-check
# TORCH_INDEX: the package index torch and torchvision come from. Empty: PyPI, whose Linux torch is the CUDA
# build (about 6.8 GB with its nvidia-* and triton wheels, ~5 minutes to install); on a machine without a GPU,
# `make demo-models TORCH_INDEX=https://download.pytorch.org/whl/cpu` installs the CPU build (about 0.2 GB) at
# the same pinned version.
TORCH_INDEX ?=
TORCH_PINS := $(shell sed -n 's/^\(torch[a-z]*\)==.*/\1/p' constraints/torch.txt 2>/dev/null | tr '\n' ' ')
# One line when the torch install fails (an unreachable index, no wheel for this Python or platform), after pip's
# own lines: why, and what to run instead (the scorer side needs no torch).
TORCH_HINT = make: torch did not install from $(or $(TORCH_INDEX),PyPI) (pip's last lines above say why: no \
	network, the index unreachable, or no wheel for this Python/platform); retry with another TORCH_INDEX \
	(e.g. https://download.pytorch.org/whl/cpu, or empty for PyPI) after make clean, or install the scorer side \
	alone, which needs no torch: $(PYTHON) -m pip install .
ifeq ($(strip $(TORCH_INDEX)),)
TORCH_FROM := PyPI: the CUDA build, about 6.8 GB with its CUDA libraries, ~5 minutes; without a GPU, \
	make demo-models TORCH_INDEX=https://download.pytorch.org/whl/cpu installs the CPU build instead (about 0.2 GB)
TORCH_INDEX_ARGS :=
else
TORCH_FROM := $(TORCH_INDEX)
TORCH_INDEX_ARGS := --index-url $(TORCH_INDEX)
endif

# Test workers: pytest-xdist processes (auto = one per usable core). Modules stay whole on one worker
# (--dist loadscope), so a module's shared fixture is built once, not once per worker.
PYTEST_WORKERS ?= auto
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist loadscope
# The grand-challenge evaluation image `make container` builds (platforms/grand-challenge/build.sh).
IMAGE ?= xbench-eval

.PHONY: install install-demo demo demo-models test lint test-scorer-only dist container bench clean s3rver

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints/torch.txt
	$(PYTHON) -m venv $(VENV)
	@echo "installing $(TORCH_PINS)(constraints/torch.txt) from $(TORCH_FROM)"
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar on $(TORCH_INDEX_ARGS) \
		-c constraints/torch.txt $(TORCH_PINS) || { echo "$(TORCH_HINT)" >&2; exit 1; }
	@echo "installing XBench with the extract and dev extras (torch is kept)"
	$(PIP_INSTALL) -e ".[extract,dev]" -c constraints/torch.txt
	$(BIN)/xbench warm  # compile the scorer's kernels once, on all cores (score/warm.py)
	@touch $@

# The torch-free first run: the scorer's dependencies and the `demo` extra (no torch), or nothing when the full
# venv is already there; then the demo on the weight-free baselines (random, center, dog: their catalog entries
# say they need no torch).
DEMO_BASELINES := random,center,dog
install-demo: $(VENV)/.installed-demo

$(VENV)/.installed-demo: pyproject.toml
	@if [ -f $(VENV)/.installed ]; then echo "$(VENV) is already the full install (make install)"; else \
		$(PYTHON) -m venv $(VENV) && \
		echo "installing XBench with the demo extra (no torch: the scorer, pyyaml, pillow)" && \
		$(PIP_INSTALL) -e ".[demo]"; fi
	@touch $@

demo: install-demo
	$(BIN)/xbench demo --out $(DEMO_OUT) --models $(DEMO_BASELINES)

# The second, opt-in step: torch (make install) and the demo with every model, the untrained clip-tiny included.
demo-models: install
	$(BIN)/xbench demo --out $(DEMO_OUT)

# The lint configuration is [tool.ruff] in pyproject.toml; CI runs this and expects no finding.
lint: install
	$(BIN)/ruff check .

test: install s3rver
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

# An S3-compatible server (s3rver, from npm) for the s3:// tests, outside the package; where npm is missing
# or unreachable the S3 test skips and everything else still runs.
S3RVER := .cache/s3rver/node_modules/.bin/s3rver
s3rver:
	@[ -x $(S3RVER) ] || ! command -v npm >/dev/null || \
		npm install --silent --no-audit --no-fund --prefix .cache/s3rver s3rver@3.7.1 >/dev/null 2>&1 || \
		echo "note: s3rver did not install; the S3 test will skip"

# The wheel and the sdist PyPI would get (dist/), checked with `twine check --strict`.
dist: install
	rm -rf dist
	$(PIP_INSTALL) build twine
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python -m twine check --strict dist/*

# The scorer side alone: the wheel from `make dist` installed (not editable) in its own venv, without torch.
test-scorer-only: dist
	rm -rf .venv-scorer
	$(PYTHON) -m venv .venv-scorer
	.venv-scorer/bin/python -m pip install -q --disable-pip-version-check "$$(ls dist/*.whl)[dev]"
	.venv-scorer/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"
	.venv-scorer/bin/python -c "import importlib.metadata as m; print('installed', m.version('xbench-cxr'))"
	cd tests && ../.venv-scorer/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_PARALLEL) schemas score test_packaging.py

# The grand-challenge evaluation image (platforms/grand-challenge/Dockerfile); BASE=image picks the base.
container:
	platforms/grand-challenge/build.sh $(IMAGE)

bench: install
	$(BIN)/python benchmarks/score_fullscale.py

clean:
	rm -rf $(VENV) .venv-scorer $(DEMO_OUT) *.egg-info .cache/s3rver dist build
