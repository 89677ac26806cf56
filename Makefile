# fenceproxy: `make` builds, `make test` runs every test against a real
# MariaDB/MySQL server (installing mariadb-server with apt-get if no server
# binary is found), `make unit` runs the fast tier (no server started: the
# tests that need one are skipped and counted), `make bench` runs the
# benchmarks. docs/testing.md names each package's tier.
GO ?= go

.PHONY: build test unit vet bench bench-sysbench bench-table demo clean

build:
	$(GO) build -o bin/fenceproxy ./cmd/fenceproxy

test:
	./scripts/test.sh

unit:
	./scripts/unit.sh

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./proxy/ ./rewrite/

bench-sysbench:
	./integration/bench/sysbench.sh

# The README's Benchmarks tables (about 15 minutes).
bench-table:
	./integration/bench/table.sh --rounds 5

demo: build
	./bin/fenceproxy demo

clean:
	rm -rf bin
