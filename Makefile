# stockguard: `make test` is the one command that runs every test, on a fresh machine too.
GO       ?= go
PKGS     ?= ./...
TESTARGS ?=

.PHONY: test deps redis-server vet bench loadtest run

## test: install what the tests need, then vet and run every test under the race detector.
test: deps vet
	$(GO) test -race -count=1 -timeout 15m $(TESTARGS) $(PKGS)

## deps: Go modules and a real redis-server (Debian package, installed when missing and root).
deps: redis-server
	$(GO) mod download

redis-server:
	@if ! command -v redis-server >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing redis-server with apt-get"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
	  else \
	    echo "redis-server is missing: install the redis-server package (e.g. sudo apt-get install -y redis-server)" >&2; exit 1; \
	  fi; \
	fi
	@redis-server --version

vet:
	$(GO) vet $(PKGS)

## bench: the lock benchmarks, next to the peer libraries (nested module under bench/).
bench: deps
	cd bench && $(GO) test -run '^$$' -bench . -benchtime 3s .

## loadtest: the self-contained comparison of every strategy across three processes.
loadtest: deps
	$(GO) run ./loadtest

## run: the demo storefront.
run:
	$(GO) run . --demo
