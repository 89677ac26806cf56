# fenceproxy: `make` builds, `make test` runs every test against a real
# MariaDB/MySQL server (installing mariadb-server with apt-get if no server
# binary is found), `make bench` runs the benchmarks.
GO ?= go

.PHONY: build test vet bench bench-sysbench bench-table demo clean

build:
	$(GO) build -o bin/fenceproxy ./cmd/fenceproxy

test:
	./scripts/test.sh

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
