# stockguard: `make test` is the one command that runs every test, on a fresh machine too.
GO       ?= go
PKGS     ?= ./...
TESTARGS ?=
# Every go command here builds with -trimpath: the build cache's keys then leave out the
# checkout's directory, so a fresh clone (CI's, a second worktree) reuses what another checkout
# compiled instead of compiling every package of this module again (on 2 cores, about 100 s of
# the race pass's build alone; docs/architecture.md#tests). Stack traces and race reports name
# files by module path (github.com/stockguard/stockguard/locking/hold.go), not by disk path.
# (override: a GOFLAGS given on make's command line is added to, not put in its place)
override GOFLAGS := $(strip $(if $(filter -trimpath,$(GOFLAGS)),$(GOFLAGS),-trimpath $(GOFLAGS)))
export GOFLAGS

.PHONY: test test-passes test-beside test-short testbin deps system-packages vet bench oapigen jaeger loadtest perf run lab screenshots sim

# The run's storefront builds, go test's events and the run's start (git ignores it).
TESTBIN     ?= $(CURDIR)/.testbin
# make test fails past this wall time, naming the slowest tests (docs/architecture.md#tests).
TEST_BUDGET ?= 15m
TESTTIME     = $(TESTBIN)/testtime
# The storefront binaries the tests start as processes, built once per run (internal/storefrontbin).
STOREFRONT_ENV = STOCKGUARD_BIN=$(TESTBIN)/stockguard STOCKGUARD_BIN_LEAKTEST=$(TESTBIN)/stockguard-leaktest \
	STOCKGUARD_BIN_NODEMO=$(TESTBIN)/stockguard-nodemo
# The race pass runs TEST_P test binaries at once, the slowest packages started first (go test
# starts them in the order given; ./... after them adds the rest once): most tests wait on
# servers, leases and fault windows, so two binaries leave a core idle a third of the time.
# Longest first, down to the 10-second packages: the run then ends on packages of a second or
# two, not on one of 15 s started last (docs/architecture.md#tests).
TEST_P     ?= 4
SLOW_FIRST ?= ./loadtest/scenario ./inventory . ./locking ./lab ./pitfalls ./models ./deploy ./handlers \
	./internal/redisproc ./internal/pgproc ./loadtest/soak ./internal/linearize ./loadtest
RACE_PKGS   = $(if $(filter ./...,$(PKGS)),$(SLOW_FIRST) $(PKGS),$(PKGS))
# The run's binaries (test binaries and the storefront builds) are linked without DWARF (-w):
# nothing in a run reads it (stack traces and race reports use the symbol table, which stays),
# and it is about 40% of the linker's work: about 35 s of CPU over the run's 50 race-built
# binaries (docs/architecture.md#tests). A binary to debug with Delve: go test -c, without it.
TEST_LDFLAGS ?= -w
# gotest NAME,ARGS: one pass of go test (ARGS after -json -count=1), its usual text on stdout, its
# events in $(TESTBIN)/NAME.json for the slowest-tests summary; the pass fails as go test does.
gotest = $(STOREFRONT_ENV) $(TESTTIME) run -json $(TESTBIN)/$(1).json -- $(GO) test -json -count=1 -ldflags='$(TEST_LDFLAGS)' $(2)

## test: install what the tests need, build the storefront once, vet and run every test under
## the race detector, then what the nodemo tag changes (its vet, and the tests written for it);
## ends with the 15 slowest tests and fails past TEST_BUDGET.
test:
	@rm -rf $(TESTBIN) && mkdir -p $(TESTBIN) && date +%s > $(TESTBIN)/start
	@$(MAKE) --no-print-directory test-passes; status=$$?; \
	  $(GO) run ./internal/testtime summary -start $(TESTBIN)/start -budget $(TEST_BUDGET) $(TESTBIN)/*.json || status=1; \
	  exit $$status

# test-passes: the passes of make test. The race pass runs every test; beside it, at a lower
# priority (nice), so that they take the cores its waits leave idle, run what the nodemo tag
# changes (no lab, no demo strategies: its vet, which builds every package and test without the
# demo, and the tests written for that build: the root's TestNodemoBuild, and handlers, whose
# test setup the tag changes; locking, models and inventory's tests are the same code in both
# builds, run once) and the simulator's short run. Their output follows the race pass's.
# The race pass vets with every analyzer (-vet=all: what `go vet` runs), on the race build it
# compiles anyway: a go vet before it compiled every package once more, without -race (about
# 30 s of CPU). The passes beside it run -vet=off where a full vet of their build ran first.
# One chain, the simulator's run last: started with the race pass as a chain of its own, its
# eight bubbles loaded the machine while the race pass's four heaviest packages ran, and
# timing tests of locking and pitfalls failed (docs/architecture.md#tests, runs 7 and 8).
test-passes: deps testbin
	@nice -n 5 $(MAKE) -k --no-print-directory test-beside > $(TESTBIN)/beside.log 2>&1 & beside=$$!; \
	  echo "go test -race -vet=all ./... (the nodemo and simulator passes run beside it: their output follows)"; \
	  $(call gotest,race,-vet=all -race -p $(TEST_P) -timeout 15m $(TESTARGS) $(RACE_PKGS)); race=$$?; \
	  wait $$beside; beside=$$?; cat $(TESTBIN)/beside.log; \
	  [ $$race = 0 ] && [ $$beside = 0 ]

# test-beside: the passes make test runs beside the race pass (one line each).
test-beside:
	$(GO) vet -tags nodemo $(PKGS)
	$(call gotest,nodemo,-vet=off -tags nodemo -run '^TestNodemoBuild$$' .)
	$(call gotest,nodemo-handlers,-vet=off -tags nodemo ./handlers)
	$(call gotest,sim,-tags simmutation -timeout 10m -parallel 8 ./sim) # the simulator's short run, without -race (docs/simulation.md)

# testbin: the storefront as the tests start it (default, -tags leaktest, -tags nodemo) and testtime.
testbin:
	@mkdir -p $(TESTBIN)
	$(GO) build -o $(TESTBIN)/testtime ./internal/testtime
	@# the three differ in two packages: built at once
	$(GO) build -ldflags='$(TEST_LDFLAGS)' -o $(TESTBIN)/stockguard . & a=$$!; \
	  $(GO) build -ldflags='$(TEST_LDFLAGS)' -tags leaktest -o $(TESTBIN)/stockguard-leaktest . & b=$$!; \
	  $(GO) build -ldflags='$(TEST_LDFLAGS)' -tags nodemo -o $(TESTBIN)/stockguard-nodemo . & c=$$!; \
	  s=0; for p in $$a $$b $$c; do wait $$p || s=1; done; exit $$s

## test-short: the inner loop (at most 90 s): the unit tests and the real-server tests, four
## binaries at once, the slowest first; the multi-process, fault, browser, build and PostgreSQL
## tests and the simulator's mutation runs skip, naming their group (internal/testutil); the
## simulator runs 12 schedules.
## Without the race detector: under -race the same run took 93 to 106 s (its builds about 83 s
## of CPU, mostly linking 50 race-built binaries; the tests' own CPU doubled); make test runs
## every test under -race, and `make test-short TESTARGS=-race` is the inner loop with it
## (docs/architecture.md#tests).
test-short:
	$(GO) test -short -count=1 -p $(TEST_P) -ldflags='$(TEST_LDFLAGS)' $(TESTARGS) $(RACE_PKGS)

## jaeger: build Jaeger v1.76.0 from its Go sources (tools/jaeger) once into the user's cache, so that
## TestTracesInJaeger runs (it skips while no build is cached: a cold build takes 10 min or more).
jaeger:
	STOCKGUARD_JAEGER_BUILD=1 $(GO) test -count=1 -timeout 0 -run '^TestTracesInJaeger$$' .

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

## oapigen: the client generated from handlers/openapi.json by oapi-codegen is current, and
## drives a running storefront (nested module under tools/oapigen/).
oapigen: deps
	cd tools/oapigen && $(GO) test -count=1 ./...

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
