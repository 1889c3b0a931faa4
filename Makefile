# The relay's two set-up commands are `make run` and `make test`.
.PHONY: run test build vet fmt clean

run:  ## the demo: cloud on embedded SQLite, a claimed host, a receiver
	scripts/run.sh

test: ## every test, on SQLite and on a throwaway Postgres
	scripts/test.sh

build:
	go build -o bin/cloud ./cloud
	go build -o bin/host ./host

vet:
	go vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin .run
