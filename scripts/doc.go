// Package scripts tests the repository's shell entry points as a new user
// meets them: `make run` (scripts/run.sh) and the README's walkthrough, each
// run as written, as real processes. It has no code of its own.
package scripts
