package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

// TestCompare: each way the ledger and the cloud can disagree is found,
// and agreement is not reported.
func TestCompare(t *testing.T) {
	since := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	at := since.Add(time.Hour)
	entry := func(id string, r ledger.Result) ledger.Entry {
		return ledger.Entry{DeliveryID: id, Result: r, ProcessedAt: at, ReceivedAt: at}
	}
	cloud := []shared.HostDelivery{
		{DeliveryID: "acked-ok", Status: "acked"},
		{DeliveryID: "retrying-done", Status: "retrying"},
		{DeliveryID: "delivered-pending", Status: "delivered"},
		{DeliveryID: "dlq-done", Status: "dlq", Attempts: 5, LastError: "lease expired"},
		{DeliveryID: "dlq-failed", Status: "dlq"},
		{DeliveryID: "acked-missing", Status: "acked"},
		{DeliveryID: "acked-failed", Status: "acked"},
		{DeliveryID: "queued-new", Status: "queued"},
		{DeliveryID: "retrying-failed", Status: "retrying"},
	}
	entries := []ledger.Entry{
		entry("acked-ok", ledger.ResultSuccess),
		entry("retrying-done", ledger.ResultSuccess),
		entry("delivered-pending", ledger.ResultSkipped),
		entry("dlq-done", ledger.ResultSuccess),
		entry("dlq-failed", ledger.ResultError),
		entry("acked-failed", ledger.ResultError),
		entry("retrying-failed", ledger.ResultError),
		entry("pruned", ledger.ResultSuccess),
		{DeliveryID: "old", Result: ledger.ResultSuccess, ProcessedAt: at, ReceivedAt: since.Add(-time.Hour)},
	}
	got := compare(cloud, entries, map[string]bool{"delivered-pending": true}, since)
	kinds := map[string]string{}
	for _, d := range got {
		kinds[d.DeliveryID] = d.Kind
		require.NotEmpty(t, d.Meaning)
		require.NotEmpty(t, d.Action)
	}
	require.Equal(t, map[string]string{
		"retrying-done":     kindAckLost,
		"delivered-pending": kindAckPending,
		"dlq-done":          kindDeadButDone,
		"acked-missing":     kindAckedNotInLedger,
		"acked-failed":      kindAckedButFailed,
		"pruned":            kindUnknownToCloud,
	}, kinds)
	for _, d := range got {
		require.Equal(t, d.Kind == kindAckLost || d.Kind == kindAckPending || d.Kind == kindDeadButDone, d.Fixable, d.DeliveryID)
	}
	require.Empty(t, compare(cloud[:1], entries[:1], nil, since), "agreement is no disagreement")
}
