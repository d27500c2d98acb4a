# stockguard: `make test` is the one command that runs every test, on a fresh machine too.
GO       ?= go
PKGS     ?= ./...
TESTARGS ?=

.PHONY: test deps system-packages vet bench loadtest perf run lab screenshots sim

## test: install what the tests need, then vet and run every test under the race detector; then
## the storefront built without the demo (-tags nodemo: no lab, no demo strategies).
test: deps vet
	$(GO) test -race -count=1 -timeout 15m $(TESTARGS) $(PKGS)
	$(GO) test -tags nodemo -count=1 . ./handlers ./inventory ./models ./locking
	$(GO) test -tags simmutation -count=1 -timeout 5m -parallel 8 ./sim # the simulator's short run, without -race

## deps: Go modules, a real redis-server, the PostgreSQL server binaries and Chromium for the
## lab's browser test, nginx for the routing test (Debian packages redis-server, postgresql,
## chromium and nginx-light, installed with one
## apt-get when missing and root). The tests start their own private servers (and a headless
## Chromium); nothing is started here.
deps: system-packages
	$(GO) mod download

system-packages:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	{ [ -x "$$(pg_config --bindir 2>/dev/null)/initdb" ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || missing="$$missing postgresql"; \
	command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$$missing nginx-light"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing with apt-get"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing:$$missing: install the Debian package(s) (e.g. sudo apt-get install -y$$missing)" >&2; exit 1; \
	  fi; \
	fi
	@redis-server --version
	@ls -d /usr/lib/postgresql/*/bin 2>/dev/null || pg_config --bindir
	@PATH="$$PATH:/usr/sbin" nginx -v

vet:
	$(GO) vet $(PKGS)

## bench: the lock benchmarks, next to the peer libraries (nested module under bench/).
bench: deps
	cd bench && $(GO) test -run '^$$' -bench . -benchtime 3s .

## loadtest: the self-contained comparison of every strategy across three processes (SQLite;
## `make loadtest LOADTEST_ARGS="-db postgres"` for a private PostgreSQL).
LOADTEST_ARGS ?=
loadtest: deps
	$(GO) run ./loadtest $(LOADTEST_ARGS)

## perf: same-run req/s, p50/p99 and ratios of /healthz, guard, lock+guard and lock+guard
## --max-batch 1 (one storefront, redis-server, 64 clients, no work; 1 hot item, then 10).
PERF_ARGS ?=
perf: deps
	$(GO) run ./loadtest -perf $(PERF_ARGS)

## run: the demo storefront.
run:
	$(GO) run . --demo

## lab: the lock lab over three storefront processes (open http://localhost:8080).
lab:
	$(GO) run . --demo --instances 3

## screenshots: rewrite the lab screenshots of README (docs/lab-*.png) with the browser test.
screenshots: deps
	$(GO) test -count=1 -run TestLabInBrowser ./lab -update # -update after the package: before it, go test would take ./lab for its value

## sim: the simulator (docs/simulation.md): SIM_SEEDS schedules of the real code, then the
## mutation runs, without -race; the last line is the rate. One seed again: make sim SIM_ARGS=-sim.seed=S
SIM_SEEDS ?= 200
sim:
	$(GO) test -c -tags simmutation -o sim.test ./sim
	./sim.test -test.run 'TestSim$$|TestMutations' -test.timeout 0 -test.parallel 8 -sim.weak -sim.seeds=$(SIM_SEEDS) $(SIM_ARGS); s=$$?; rm -f sim.test; exit $$s
