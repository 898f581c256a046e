# Developer shortcuts. The README's two commands are the way in; these are for maintainers.

PYTHON ?= python3
CHAOS_REPORT ?= $(CURDIR)/chaos-report.jsonl
CHAOS_ENVS ?= py311-django52-postgres,py311-django52-sqlite

.PHONY: test chaos bench screenshots layers

test:  ## the whole matrix, as CI runs it
	$(PYTHON) -m tox

# The fault battery at the issue's full sizes on PostgreSQL and SQLite (tens of minutes); each
# test's figures are appended to $(CHAOS_REPORT), the source of docs/explanation/reliability.md.
chaos:
	rm -f $(CHAOS_REPORT)
	WORKQUEUE_CHAOS=full WORKQUEUE_CHAOS_REPORT=$(CHAOS_REPORT) \
		$(PYTHON) -m tox -e $(CHAOS_ENVS) -- -m chaos --timeout=3600 -p no:cacheprovider tests/chaos
	@echo "figures: $(CHAOS_REPORT)"

bench:  ## the full benchmark against the peers (see docs/explanation/performance.md)
	$(PYTHON) bench/run.py

# The README's pictures, taken by the browser tests (tests/browser) in the system's Chromium.
screenshots:
	WORKQUEUE_UPDATE_SCREENSHOTS=1 $(PYTHON) -m tox -e py311-django52-sqlite -- tests/browser

# The import layers (docs/explanation/architecture.md): the contracts, then the measures
# (import cycles, imports inside functions, longest function and module, lines of code).
layers:
	lint-imports
	$(PYTHON) -m tests.support.layering
