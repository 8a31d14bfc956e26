# idemops — the two commands that matter: `make run` and `make test`.
GO ?= go
PKGS := ./...

.PHONY: prereqs run test screenshots test-race test-failover test-cells bench vet fmt generate check build chaos

## prereqs: check the system packages idemops uses (PostgreSQL, RabbitMQ, pg_auto_failover,
## pgbouncer, Chromium, npm, promtool); as root with apt-get, install the missing ones
prereqs:
	@bash scripts/prereqs

## run: start the whole thing (private PostgreSQL and RabbitMQ, paysim, demo traffic, the
## daemon, the console); flags go in ARGS: make run ARGS="--console-addr 127.0.0.1:9090".
## The binary is built, then exec'd in place of the recipe's shell: a TERM to make (which make
## passes on) or a Ctrl-C reaches it, and it stops everything it started. CELLS=2 runs two
## tenant cells, a private PostgreSQL each (demo --cells 2); unset: one database.
ARGS ?=
CELLS ?=
run: prereqs
	$(GO) build -o bin/idemops ./cmd/idemops && exec ./bin/idemops demo $(if $(CELLS),--cells $(CELLS)) $(ARGS)

## build: build the binaries into ./bin
build:
	$(GO) build -o bin/ ./cmd/...

## chaos: the demo world as separate processes under a seeded fault schedule, invariants checked
## at the end, the report under CHAOS_OUT (exit 1 when an invariant broke); CHAOS_CELLS=2 splits
## the tenants over two cells (each a pg_auto_failover pair), one cell's primary killed
CHAOS_DURATION ?= 5m
CHAOS_SEED ?= 1
CHAOS_OUT ?= chaos-report
CHAOS_CELLS ?= 1
chaos: prereqs
	$(GO) build -o bin/ ./cmd/idemops
	./bin/idemops chaos --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED) --out $(CHAOS_OUT) --cells $(CHAOS_CELLS)

## test: all tests against one private PostgreSQL cluster and one RabbitMQ broker shared by every
## package; the HA failover test and the cells proof (chaos/failover) run last, alone, one after
## the other: on 2 cores, killing a primary while every other package's tests compete for the CPU
## measures the machine, not the failover; verbose, so that every run shows their lines
## ("failover: …", "cells: …" with cell b's p99 through the kill) and how they were read. Four
## packages at a time and four parallel tests in each, not the default two (one per core): they
## mostly wait on PostgreSQL, RabbitMQ or a timer, and two at a time left the cores idle (browser
## walks, which compute, keep to two a package: browsertest.Slot). The two longest packages,
## console and cmd/idemops, are named first so that they start first: listed in import-path
## order, console started a third of the way in and ran alone at the end (phase 1 with everything
## else stopped: 156 s that way, 147 s this way)
test: prereqs
	$(GO) run ./cmd/withpg -- sh -c '$(GO) test -count=1 -p 4 -parallel 4 -timeout 10m ./console/ ./cmd/idemops/ $$($(GO) list $(PKGS) | grep -v -e /chaos/failover$$ -e /console$$ -e /cmd/idemops$$) && $(GO) test -count=1 -v -timeout 8m ./chaos/failover/'

## screenshots: the console's browser walks with their screenshots (every page they check, both
## languages, 1400/1024/390 px, and axe-results.json) saved to screenshots/ (git-ignored);
## `make test` runs the same checks without them (docs/CONSOLE.md, Tests)
screenshots: prereqs
	IDEMOPS_SCREENSHOTS=screenshots $(GO) run ./cmd/withpg -- $(GO) test -count=1 -run 'TestBrowser' ./console/

## test-failover: only the HA failover test, verbose, so its "failover: …" line shows
test-failover: prereqs
	$(GO) run ./cmd/withpg -- $(GO) test -count=1 -v -run Failover ./chaos/failover/

## test-cells: only the cells proof (two HA cells, one cell's primary killed, a tenant moved),
## verbose, so how cell b's p99 was read shows beside its "cells: …" line (make test asserts the
## same: cell b's p99 ≤ 1.2× idle on a quiet machine)
test-cells: prereqs
	$(GO) run ./cmd/withpg -- $(GO) test -count=1 -v -run Cells ./chaos/failover/

## test-race: the claim core under the race detector
test-race: prereqs
	$(GO) run ./cmd/withpg -- $(GO) test -race -count=1 ./claim/...

## bench: benchmarks against their baselines, one run each, one package at a time (two
## packages' benchmarks side by side on a 2-core machine measure each other, not themselves);
## 4GB of shared buffers so that the million-key databases stay in memory
bench: prereqs
	$(GO) run ./cmd/withpg --shared-buffers 4GB -- $(GO) test -p 1 -run '^$$' -bench . -benchtime 1x -count=1 -timeout 60m $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -l -w .

generate:
	$(GO) tool templ generate

## check: what CI checks besides the tests
check: vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)
