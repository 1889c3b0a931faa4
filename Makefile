# The relay's two set-up commands are `make run` and `make test`.
.PHONY: run test bench chaos soak build release vet fmt clean

# The version every build carries is shared/buildinfo/VERSION (embedded);
# make build and make release link the commit (scripts/commit.sh), which a
# plain go build shows only where Go stamps its VCS information.
COMMIT ?= $(shell scripts/commit.sh)
# make build builds cloud and host as make release does (scripts/release.sh
# --flat: static, without gin's MessagePack binding): a command such as
# `cloud ctl inspect` starts some 7 ms sooner than a plain go build's
# (docs/deploy.md, Binaries).
BIN ?= bin

run:  ## the demo: cloud on embedded SQLite, a claimed host, a receiver
	scripts/run.sh

test: ## every test, on SQLite and on a throwaway Postgres
	scripts/test.sh

bench: ## throughput and latency on Postgres and SQLite; writes BENCHMARKS.md (make bench BENCH_FLAGS=-quick: a smoke run, printed only)
	go run ./scripts/bench $(BENCH_FLAGS)

chaos: ## the fault suite, every scenario at full length
	go run ./scripts/chaos $(CHAOS_FLAGS)

soak: ## an hour of steady traffic with nothing allowed to grow; writes SOAK.md and soak.svg (make soak SOAK_FLAGS=-short: 4 minutes, printed only)
	go run ./scripts/soak $(SOAK_FLAGS)

build: ## bin/cloud, bin/host, bin/demo-receiver, bin/send-sample (a plain `go build ./cloud` would collide with the cloud/ directory), cloud and host built as a release's (scripts/release.sh --flat); the version is shared/buildinfo/VERSION's, as in every build (BIN: another directory)
	VERSION=$$(cat shared/buildinfo/VERSION) COMMIT=$(COMMIT) scripts/release.sh --flat --out $(BIN)
	CGO_ENABLED=0 go build -trimpath -o $(BIN)/ ./scripts/demo-receiver ./scripts/send-sample

release: ## static cloud and host binaries for linux and darwin on amd64 and arm64 with SHA256SUMS, in dist/VERSION/ (VERSION: shared/buildinfo/VERSION's unless given; COMMIT, RELEASE_PLATFORMS override)
	scripts/release.sh

vet:
	go vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin .run dist
