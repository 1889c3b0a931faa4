package verify

import "fmt"

// ReplayGuardOption turns a source's replay guard on ("on") or off ("off",
// the default). Only the sources of an Untimed provider take it.
const ReplayGuardOption = "replay_guard"

// Untimed is declared by a provider whose signature (or token) covers the
// body but no timestamp, and whose event id travels in an unsigned header:
// whoever holds one signed request can send it again under a new id, and
// dedupe (which keys on that id) takes it for a new event. The sources of
// such a provider can be guarded against replays (see ReplayGuarded): a
// body identical to one delivered within the replay window under another
// event id is held, not delivered. It is off unless a source turns it on:
// the look-up it makes before each insert costs intake a quarter of its
// rate on SQLite and half on Postgres (BenchmarkIntake/…/guard=on|off).
type Untimed interface {
	SignsWithoutTimestamp()
}

// ReplayGuarded reports whether a source of p with opts has the replay
// guard on: p is Untimed, and the source turned it on.
func ReplayGuarded(p Provider, opts map[string]string) bool {
	if _, ok := p.(Untimed); !ok {
		return false
	}
	return opts[ReplayGuardOption] == "on"
}

// checkReplayGuard validates replay_guard for the provider named provider:
// "on" or "off", and only where there is a guard to turn off.
func checkReplayGuard(provider, v string) error {
	if p, ok := registry[provider]; !ok || !isUntimed(p) {
		return fmt.Errorf("%s signs with a timestamp, its window stops replays: there is no replay guard to set", provider)
	}
	if v != "on" && v != "off" {
		return fmt.Errorf("%q: on or off", v)
	}
	return nil
}

func isUntimed(p Provider) bool {
	_, ok := p.(Untimed)
	return ok
}

// SignsWithoutTimestamp: GitHub signs the body alone.
func (github) SignsWithoutTimestamp() {}

// SignsWithoutTimestamp: Shopify signs the body alone.
func (shopify) SignsWithoutTimestamp() {}

// SignsWithoutTimestamp: GitLab sends a token, the same on every request.
func (gitlab) SignsWithoutTimestamp() {}
