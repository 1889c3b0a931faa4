package main

import (
	"fmt"
	"os"

	"github.com/relaykit/relay/host/agent"
)

// envTestCrash arms a fault hook for end-to-end tests ONLY: with
// RELAY_HOST_TEST_CRASH=after-handler the host kills itself (SIGKILL, as a
// power cut would) right after a handler returned and before its outcome is
// written to the ledger; with after-ledger, right after the outcome and its
// ack are committed and before the ack is sent. Tests use it to show which
// crashes run a handler again (after-handler: the at-least-once window the
// Idempotency-Key exists for) and which never do (after-ledger). It is
// unset in normal use, and `host run` logs a warning whenever it is set.
const envTestCrash = "RELAY_HOST_TEST_CRASH"

// testFaultHook returns the hook RELAY_HOST_TEST_CRASH asks for, or nil.
func testFaultHook(getenv func(string) string) (func(string), error) {
	point := getenv(envTestCrash)
	switch point {
	case "":
		return nil, nil
	case agent.FaultAfterHandler, agent.FaultAfterLedger:
	default:
		return nil, fmt.Errorf("%s=%q: want %s or %s", envTestCrash, point, agent.FaultAfterHandler, agent.FaultAfterLedger)
	}
	return func(at string) {
		if at != point {
			return
		}
		fmt.Fprintf(os.Stderr, "%s: killing the host at %s\n", envTestCrash, at)
		self, err := os.FindProcess(os.Getpid())
		if err == nil {
			err = self.Kill()
		}
		if err != nil {
			os.Exit(137)
		}
		select {} // the signal is on its way; nothing more runs here
	}, nil
}
