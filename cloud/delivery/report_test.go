package delivery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// TestReportedResults: a report keeps the results of the runs it acks or
// nacks, valid ones only, the last of each delivery, stamped when reported.
func TestReportedResults(t *testing.T) {
	now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	r := &Report{
		Acks:  []string{"a"},
		Nacks: []Nack{{ID: "n"}},
		Results: []store.DeliveryResult{
			{DeliveryID: "a", Result: "error"},
			{DeliveryID: "a", Result: "success", Attempt: 2},
			{DeliveryID: "n", Result: "error"},
			{DeliveryID: "n2", Result: "success"},
			{DeliveryID: "n", Result: "bogus"},
		},
	}
	require.Equal(t, []store.DeliveryResult{
		{DeliveryID: "a", Result: "success", Attempt: 2, ReportedAt: now},
		{DeliveryID: "n", Result: "error", ReportedAt: now},
	}, reportedResults(r, now))
	require.Nil(t, reportedResults(&Report{Acks: []string{"a"}}, now))
}
