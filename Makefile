# Signoff: `make demo` and `make test` install what they need themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-signoff
EXTRAS := agents,local-redis,agent-server,test,bench

.PHONY: fuzz install demo test lint redis bench clean constraints chromium kubectl
PORT   ?= 3000

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Signoff needs Python >= 3.11; set PYTHON=python3.11")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[$(EXTRAS)]"
	@touch $@

install: $(STAMP)

# `make demo PORT=3200` when 3000 is taken.
demo: $(STAMP)
	$(BIN)/signoff demo --port $(PORT)

# The browser tests use the distribution's Chromium (as root, as CI runs); never `playwright install`.
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-color-emoji >/dev/null; } || \
	  { echo "make test needs Chromium for the browser tests: apt-get install chromium (as root)"; exit 1; }

# `kubectl kustomize` renders deploy/k8s in the tests (Debian's kubernetes-client when missing).
kubectl:
	@command -v kubectl >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null; } || \
	  { echo "make test needs kubectl to render deploy/k8s: apt-get install kubernetes-client (as root)"; exit 1; }

# Lint, format, types and the layer rule: the same checks CI runs, before the tests.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Two workers, each module on one of them (its servers and fixtures start once): the suite
# mostly waits on processes, Redis and timers, so two cores run it in about half the time.
test: $(STAMP) chromium kubectl lint
	$(BIN)/python -m pytest -n 2 --dist loadfile

redis: $(STAMP)
	$(BIN)/signoff redis

# The fuzz suite at its full budget: 10,000 requests (make test runs 300 of them).
fuzz: $(STAMP)
	SIGNOFF_FUZZ_CASES=10000 $(BIN)/python -m pytest -m fuzz tests/fuzz

# Measurements, not tests: ratios against a baseline in the same run.
bench: $(STAMP)
	$(BIN)/python bench/checkpointer_losses.py --trials 20
	$(BIN)/python bench/resume.py --threads 300 --rounds 3
	$(BIN)/python bench/checkpoint_encryption.py --threads 300 --rounds 5
	$(BIN)/python bench/click_ack.py --approvals 100 --rate 100 --rounds 3
	$(BIN)/python bench/click_ack.py --approvals 100 --rate 100 --rounds 2 --features
	$(BIN)/python bench/click_cpu.py --channels 100
	$(BIN)/python bench/click_cpu.py --channels 4
	$(BIN)/python bench/policy_rules.py --approvals 100 --rate 50
	$(BIN)/python bench/chaos.py --seconds 180
	$(BIN)/python bench/chaos.py --seconds 180 --cluster
	$(BIN)/python bench/storage.py --runs 2000
	$(BIN)/python bench/search_residue.py
	$(BIN)/python bench/load.py --approvals 1000 --rate 300

# Re-pin after changing dependencies: exact versions of everything installed.
constraints:
	$(BIN)/python -m pip freeze --exclude-editable --disable-pip-version-check | grep -v '^-e ' | LC_ALL=C sort -f > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
