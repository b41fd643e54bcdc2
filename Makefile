# The two set-up commands of the README: `make demo` and `make test`. Each creates the virtual
# environment on first use, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_OUT ?= demo-out
# Torch is installed at the exact build in constraints/torch.txt (a CUDA build that also runs on
# CPU); pyproject.toml only bounds it, so a GPU machine may bring its own build.
PIP_INSTALL := $(BIN)/python -m pip install -q --disable-pip-version-check

.PHONY: install demo test test-scorer-only bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints/torch.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -e ".[extract,dev]" -c constraints/torch.txt
	$(BIN)/python -m xbench.score.warm  # compile the scorer's kernels once, on all cores (score/warm.py)
	@touch $@

demo: install
	$(BIN)/xbench demo --out $(DEMO_OUT)

test: install
	$(BIN)/python -m pytest -q

# The scorer side alone, installed as a wheel (not editable) in its own venv, without torch.
test-scorer-only:
	rm -rf .venv-scorer
	$(PYTHON) -m venv .venv-scorer
	.venv-scorer/bin/python -m pip install -q --disable-pip-version-check ".[dev]"
	.venv-scorer/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"
	cd tests && ../.venv-scorer/bin/python -m pytest -q -p no:cacheprovider schemas score test_packaging.py

bench: install
	$(BIN)/python benchmarks/score_fullscale.py

clean:
	rm -rf $(VENV) .venv-scorer $(DEMO_OUT) *.egg-info
