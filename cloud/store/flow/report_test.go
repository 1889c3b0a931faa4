package flow

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

func TestOneStep(t *testing.T) {
	t.Parallel()
	ack := &store.DeliveryAckParams{IDs: []string{"a", "b"}}
	ofAck := []store.DeliveryResult{{DeliveryID: "b"}, {DeliveryID: "a"}}
	other := []store.DeliveryResult{{DeliveryID: "a"}, {DeliveryID: "c"}}
	for name, tc := range map[string]struct {
		p    store.DeliveryReportParams
		want bool
	}{
		"nothing":                 {store.DeliveryReportParams{}, false},
		"acks alone":              {store.DeliveryReportParams{Ack: ack}, true},
		"acks with their results": {store.DeliveryReportParams{Ack: ack, Results: ofAck}, true},
		"acks with other results": {store.DeliveryReportParams{Ack: ack, Results: other}, false},
		"extends alone":           {store.DeliveryReportParams{Extend: &store.DeliveryExtendParams{}}, true},
		"extends with results":    {store.DeliveryReportParams{Extend: &store.DeliveryExtendParams{}, Results: ofAck}, false},
		"acks and extends":        {store.DeliveryReportParams{Ack: ack, Extend: &store.DeliveryExtendParams{}}, false},
		"acks and nacks":          {store.DeliveryReportParams{Ack: ack, Nack: &store.DeliveryNackParams{}}, false},
		"acks and a release":      {store.DeliveryReportParams{Ack: ack, ReleaseUnheld: &store.DeliveryReleaseUnheldParams{}}, false},
		"results alone":           {store.DeliveryReportParams{Results: other}, false},
	} {
		require.Equal(t, tc.want, OneStep(&tc.p), name)
	}
}

func TestSplitResults(t *testing.T) {
	t.Parallel()
	results := []store.DeliveryResult{{DeliveryID: "c", Attempt: 1}, {DeliveryID: "a"}, {DeliveryID: "c", Attempt: 2}, {DeliveryID: "b"}}
	of, others := splitResults([]string{"a", "c"}, results)
	require.Equal(t, []store.DeliveryResult{{DeliveryID: "c", Attempt: 1}, {DeliveryID: "a"}, {DeliveryID: "c", Attempt: 2}}, of)
	require.Equal(t, []store.DeliveryResult{{DeliveryID: "b"}}, others)
	of, others = splitResults([]string{"a"}, nil)
	require.Nil(t, of)
	require.Nil(t, others)
}
