# The two commands of the README: `make up` (the stack) and `make test` (the tests).
PYTHON ?= python3
FIOSCOPE_TARGET_DIR ?= /var/tmp/fioscope-target
export FIOSCOPE_TARGET_DIR

.PHONY: up up-native up-fleet setup setup-base test test-slow e2e lint lint-dashboards bench bench-fleet bench-baseline generate check-generated secret add-host

# docker compose where a Docker engine runs, the native stack otherwise
up: setup-base
	@if docker info >/dev/null 2>&1; then \
	  $(MAKE) secret && install -d -o 10001 -g 10001 "$(FIOSCOPE_TARGET_DIR)" && docker compose up --build; \
	else \
	  echo "no Docker engine here: starting the native stack (Prometheus, Alertmanager, node_exporter, fioscope)"; \
	  $(PYTHON) -m fioscope_mixin.native; \
	fi

up-native: setup-base
	$(PYTHON) -m fioscope_mixin.native

# the sharded fleet on this machine (docs/fleet.md, "Past one Prometheus"): SHARDS Prometheus + Thanos sidecars, Thanos Query
up-fleet:
	@scripts/setup.sh thanos
	$(PYTHON) -m fioscope_mixin.native --shards $(or $(SHARDS),2)

# everything: the packages and every tool built from Go source (CI, e2e, the benches)
setup:
	@scripts/setup.sh

# the stack runs Debian's packages and this checkout's Python: nothing built from Go source
setup-base:
	@scripts/setup.sh base

# a worker per core (pytest-xdist): most of a test's time is a real component starting or waiting. The Go tools are
# built behind the tests (promtool 3 first): the tests that need one run last and wait for it (testkit/fioscope_testkit/binaries.py)
test:
	@scripts/setup.sh --background default-suite
	$(PYTHON) -m pytest -n auto

# real-component tests of 10 s or more (marked slow; CI runs them after `make test`)
test-slow:
	@scripts/setup.sh tests
	$(PYTHON) -m pytest -m slow -n auto

e2e: setup
	$(PYTHON) -m pytest -m e2e -s

# static checks of the exporter, the mixin and the scripts beside them (settings in exporter/pyproject.toml)
lint:
	$(PYTHON) -m ruff check --config exporter/pyproject.toml exporter/ mixin/ bench/ alerts/tests/
	$(PYTHON) -m mypy --config-file exporter/pyproject.toml exporter/fioscope mixin/fioscope_mixin

# Grafana's dashboard linter on every committed dashboard, with dashboards/.lint's exclusions (scripts/setup.sh builds it)
DASHBOARD_LINTER ?= $(HOME)/.cache/fioscope/dashboard-linter-$(shell sed -n 's/^DASHBOARD_LINTER_VERSION=//p' scripts/setup.sh)/dashboard-linter
lint-dashboards:
	@for f in dashboards/*.json; do $(DASHBOARD_LINTER) lint --strict "$$f" || exit 1; done

# the benchmarks share the tests' helpers through the installed fioscope_testkit (testkit/, scripts/setup.sh)
bench: setup
	$(PYTHON) bench/bench_exporter.py

bench-fleet: setup
	$(PYTHON) bench/bench_fleet.py

# the await baseline's 6h medians once the window is full (a fleet run of minutes never fills it)
bench-baseline: setup
	$(PYTHON) bench/bench_baseline.py

# one more test host for the fleet's Prometheus (docs/fleet.md): make add-host NAME=db-7 NODE=10.0.0.7:9100 FIOSCOPE=10.0.0.7:7963
add-host:
	@test -n "$(NAME)" -a -n "$(NODE)" -a -n "$(FIOSCOPE)" || { echo "usage: make add-host NAME=host NODE=addr:9100 FIOSCOPE=addr:7963" >&2; exit 2; }
	$(PYTHON) -m fioscope_mixin.hosts add "$(NAME)" "$(NODE)" "$(FIOSCOPE)"

# rules, alerts, stack config, dashboards and Kubernetes objects from alerts/config.yaml (fioscope_mixin)
generate:
	$(PYTHON) -m fioscope_mixin generate

check-generated:
	$(PYTHON) -m fioscope_mixin check

# a random Grafana admin password, only if none is set (compose refuses to start without one)
secret:
	@test -s secrets/grafana_admin_password || { umask 077; head -c 24 /dev/urandom | base64 > secrets/grafana_admin_password; \
	  echo "Grafana admin password written to secrets/grafana_admin_password"; }
