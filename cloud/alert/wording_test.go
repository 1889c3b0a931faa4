package alert

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCount(t *testing.T) {
	require.Equal(t, "0 webhooks", count(0, "webhook"))
	require.Equal(t, "1 webhook", count(1, "webhook"))
	require.Equal(t, "2 webhooks", count(int64(2), "webhook"))
}

func TestSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                          "less than a second",
		999 * time.Millisecond:     "less than a second",
		time.Second:                "a second",
		45 * time.Second:           "45 seconds",
		time.Minute:                "a minute",
		90 * time.Second:           "1 minute 30 seconds",
		15 * time.Minute:           "15 minutes",
		time.Hour:                  "an hour",
		time.Hour + 10*time.Second: "an hour",
		90 * time.Minute:           "1 hour 30 minutes",
		2*time.Hour + 5*time.Minute + 7*time.Second: "2 hours 5 minutes",
		24 * time.Hour: "a day",
		49 * time.Hour: "2 days 1 hour",
	} {
		require.Equal(t, want, span(d), d.String())
	}
}

func TestInLast(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Hour:        "in the last hour",
		15 * time.Minute: "in the last 15 minutes",
		time.Minute:      "in the last minute",
		24 * time.Hour:   "in the last day",
		90 * time.Minute: "in the last 1 hour 30 minutes",
		2 * time.Hour:    "in the last 2 hours",
	} {
		require.Equal(t, want, inLast(d), d.String())
	}
}
