package verify

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReplayGuard(t *testing.T) {
	for _, name := range Names() {
		p, _ := Lookup(name)
		untimed := name == "github" || name == "shopify" || name == "gitlab"
		require.False(t, ReplayGuarded(p, nil), "%s: off unless a source turns it on", name)
		require.Equal(t, untimed, ReplayGuarded(p, map[string]string{ReplayGuardOption: "on"}), "%s: only a provider without a timestamp has one", name)
		oc, ok := p.(OptionsChecker)
		if !ok {
			continue
		}
		for _, v := range []string{"on", "off"} {
			err := oc.CheckOptions(map[string]string{ReplayGuardOption: v})
			if untimed {
				require.NoError(t, err, "%s: replay_guard %s", name, v)
			} else {
				require.ErrorContains(t, err, "no replay guard", name)
			}
		}
		if untimed {
			require.ErrorContains(t, oc.CheckOptions(map[string]string{ReplayGuardOption: "no"}), "on or off")
			require.False(t, ReplayGuarded(p, map[string]string{ReplayGuardOption: "off"}))
			require.True(t, ReplayGuarded(p, map[string]string{ReplayGuardOption: "on"}))
		}
	}
}
