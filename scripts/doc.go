// Package scripts tests the repository's shell entry points as a new user
// meets them: `make run` (scripts/run.sh) and the README's walkthrough, each
// run as written, as real processes; and the documents around them: every
// link of README.md and docs/ resolves, and the README stays short. It has
// no code of its own.
package scripts
