// Package e2e holds the relay's end-to-end tests: they build the real cloud
// and host binaries, run them as processes against real SQLite and Postgres,
// and send signed provider webhooks through them to a local receiver.
package e2e
