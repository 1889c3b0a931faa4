// Package deploy holds what runs the relay on the internet — the
// Dockerfile, the compose file, systemd units, reverse-proxy
// configurations — and the tests that keep them working: the release
// build's binaries run, the Dockerfile builds as `make release` does, the
// units pass systemd-analyze. It has no code of its own.
package deploy
