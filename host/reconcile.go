package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/relaykit/relay/host/agent"
	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/host/config"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

// exitDisagree is `host reconcile`'s exit code when the ledger and the
// cloud disagree (and --fix did not settle every disagreement).
const exitDisagree = 4

// Kinds of disagreement between the host's ledger and the cloud.
const (
	// Handled here, not acked in the cloud: an ack still to go, or lost.
	kindAckPending = "ack-pending"
	kindAckLost    = "ack-lost"
	// Dead-lettered in the cloud while the ledger says it was handled.
	kindDeadButDone = "dead-letter-but-done"
	// Acked in the cloud, absent from the ledger (or failed in it).
	kindAckedNotInLedger = "acked-not-in-ledger"
	kindAckedButFailed   = "acked-but-failed"
	// In the ledger, unknown to the cloud.
	kindUnknownToCloud = "unknown-to-cloud"
)

// disagreement is one delivery the ledger and the cloud see differently.
type disagreement struct {
	DeliveryID   string `json:"delivery_id"`
	Kind         string `json:"kind"`
	CloudStatus  string `json:"cloud_status"`  // "" when the cloud does not know it
	LedgerResult string `json:"ledger_result"` // "" when the ledger does not
	Meaning      string `json:"meaning"`
	Action       string `json:"action"`
	// fixable: --fix sends the ack the cloud is missing.
	Fixable bool `json:"fixable"`
}

// compare finds where the ledger and the cloud disagree about the
// deliveries received since: cloud is the cloud's record, entries the
// ledger's rows, pendingAcks the acks still in the ledger's outbox.
func compare(cloud []shared.HostDelivery, entries []ledger.Entry, pendingAcks map[string]bool, since time.Time) []disagreement {
	byID := make(map[string]ledger.Entry, len(entries))
	for _, e := range entries {
		byID[e.DeliveryID] = e
	}
	known := make(map[string]bool, len(cloud))
	var out []disagreement
	for _, d := range cloud {
		known[d.DeliveryID] = true
		e, inLedger := byID[d.DeliveryID]
		done := inLedger && e.Result.Done()
		dis := disagreement{DeliveryID: d.DeliveryID, CloudStatus: d.Status}
		if inLedger {
			dis.LedgerResult = string(e.Result)
		}
		switch {
		case done && d.Status == "dlq":
			dis.Kind, dis.Fixable = kindDeadButDone, true
			dis.Meaning = fmt.Sprintf("dead-lettered in the cloud after %d attempts (%s), yet this ledger records %s at %s: the side effect is done",
				d.Attempts, orNone(d.LastError), e.Result, e.ProcessedAt.UTC().Format(time.RFC3339))
			dis.Action = "do not retry it; --fix sends the ack the cloud is missing"
		case done && d.Status != "acked" && pendingAcks[d.DeliveryID]:
			dis.Kind, dis.Fixable = kindAckPending, true
			dis.Meaning = fmt.Sprintf("handled here (%s at %s); its ack is still in the outbox, not yet sent: the cloud says %s",
				e.Result, e.ProcessedAt.UTC().Format(time.RFC3339), d.Status)
			dis.Action = "`host run` sends it on its next heartbeat (is it running, and can it reach the cloud?); --fix sends it now"
		case done && d.Status != "acked":
			dis.Kind, dis.Fixable = kindAckLost, true
			dis.Meaning = fmt.Sprintf("handled here (%s at %s), but the cloud never got the ack: it says %s",
				e.Result, e.ProcessedAt.UTC().Format(time.RFC3339), d.Status)
			dis.Action = "--fix sends the ack; otherwise the cloud hands it out again and this host acks it without running the handler"
		case d.Status == "acked" && !inLedger:
			dis.Kind = kindAckedNotInLedger
			dis.Meaning = "acked in the cloud but absent from this ledger: handled by another machine with this host's identity, or this ledger was replaced or pruned since"
			dis.Action = "nothing to resend; check the side effect where it ran, and whether this state directory is the one the host ran with"
		case d.Status == "acked" && e.Result == ledger.ResultError:
			dis.Kind = kindAckedButFailed
			dis.Meaning = "acked in the cloud while this ledger's last run failed (" + orNone(e.Error) + "): another machine acked it, or the ledger was restored from an older copy"
			dis.Action = "check the side effect where it ran; retry by hand (cloud ctl deliveries retry) only if it did not happen"
		default:
			continue
		}
		out = append(out, dis)
	}
	for _, e := range entries {
		if known[e.DeliveryID] || e.ReceivedAt.Before(since) {
			continue
		}
		out = append(out, disagreement{DeliveryID: e.DeliveryID, Kind: kindUnknownToCloud, LedgerResult: string(e.Result),
			Meaning: "in this ledger but unknown to the cloud: pruned by its retention, or received from another cloud",
			Action:  "nothing to do unless the host was moved between clouds"})
	}
	slices.SortStableFunc(out, func(a, b disagreement) int { return strings.Compare(a.DeliveryID, b.DeliveryID) })
	return out
}

func orNone(s string) string {
	if s == "" {
		return "no error recorded"
	}
	return s
}

// reconcileTimeout bounds the whole exchange with the cloud.
const reconcileTimeout = 2 * time.Minute

func runReconcile(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("reconcile", stderr)
	stateFlag := fs.String("state", "", "state directory")
	sinceFlag := fs.String("since", "24h", "deliveries received since: a duration (24h) or an RFC 3339 time")
	fix := fs.Bool("fix", false, "send the cloud the acks it is missing (nothing else changes)")
	cloudFlag := fs.String("cloud", "", "the cloud's `URL` (default: the one host claim recorded)")
	asJSON := fs.Bool("json", false, "print JSON")
	consent := consentFlags(fs, true)
	if code, ok := parseNoArgs(fs, args, stdout); !ok {
		return code
	}
	now := time.Now()
	since, err := ledger.ParseSince(*sinceFlag, now)
	if err != nil {
		fmt.Fprintf(stderr, "host reconcile: --since: %v\n", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	r, code, err := newReconciler(ctx, *stateFlag, *cloudFlag, *consent, stderr, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "host reconcile: %v\n", err)
		return code
	}
	defer r.ledger.Close()
	found, err := r.compare(ctx, since)
	if err != nil {
		fmt.Fprintf(stderr, "host reconcile: %v\n", err)
		return exitFailure
	}
	var fixed []string
	if *fix {
		if fixed, err = r.fix(ctx, found); err != nil {
			fmt.Fprintf(stderr, "host reconcile: --fix: %v\n", err)
			return exitFailure
		}
		if len(fixed) > 0 {
			if found, err = r.compare(ctx, since); err != nil {
				fmt.Fprintf(stderr, "host reconcile: after --fix: %v\n", err)
				return exitFailure
			}
		}
	}
	if *asJSON {
		printJSON(stdout, struct {
			Since         time.Time      `json:"since"`
			Disagreements []disagreement `json:"disagreements"`
			Acked         []string       `json:"acked_by_fix"`
		}{since, append([]disagreement{}, found...), append([]string{}, fixed...)})
	} else {
		printDisagreements(stdout, found, fixed, since, *fix)
	}
	if len(found) > 0 {
		return exitDisagree
	}
	return exitOK
}

func printDisagreements(w io.Writer, found []disagreement, fixed []string, since time.Time, fix bool) {
	if len(fixed) > 0 {
		fmt.Fprintf(w, "sent %s the cloud was missing: %s\n", plural(len(fixed), "ack"), strings.Join(fixed, ", "))
	}
	if len(found) == 0 {
		fmt.Fprintf(w, "the ledger and the cloud agree on every delivery received since %s\n", since.UTC().Format(time.RFC3339))
		return
	}
	fmt.Fprintf(w, "%s since %s:\n", plural(len(found), "disagreement"), since.UTC().Format(time.RFC3339))
	fixable := 0
	for _, d := range found {
		fmt.Fprintf(w, "\n%s  %s\n", terminalSafe(d.Kind, ""), oneLine(d.DeliveryID, 300))
		fmt.Fprintf(w, "  cloud: %s   ledger: %s\n", orDashStr(d.CloudStatus), orDashStr(d.LedgerResult))
		fmt.Fprintf(w, "  means: %s\n", terminalSafe(d.Meaning, ""))
		fmt.Fprintf(w, "  do:    %s\n", d.Action)
		if d.Fixable {
			fixable++
		}
	}
	if fixable > 0 && !fix {
		fmt.Fprintf(w, "\n%d of them %s settled by `host reconcile --fix` (it sends the missing acks; nothing else changes)\n", fixable, map[bool]string{true: "is", false: "are"}[fixable == 1])
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orDashStr(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// reconciler reads the ledger and the cloud's record of this host.
type reconciler struct {
	ledger *ledger.Ledger
	client *cloudapi.Client
	creds  config.Credentials
	token  string
}

// newReconciler checks the cloud (checkCloud: --cloud, else the claimed
// one), says its warnings on stderr, and exchanges the credential for a
// token.
func newReconciler(ctx context.Context, stateFlag, cloudURL string, consent cloudConsent, stderr io.Writer,
	getenv func(string) string) (*reconciler, int, error) {
	dir, err := config.StateDir(stateFlag, getenv)
	if err != nil {
		return nil, exitUsage, err
	}
	creds, err := config.ReadCredentials(dir)
	if err != nil {
		return nil, exitUsage, err
	}
	from := "--cloud"
	if cloudURL == "" {
		cloudURL, from = creds.CloudURL, config.CredentialsFile+"'s cloud_url"
	}
	warnings, err := checkCloud(from, cloudURL, creds.CloudURL, consent)
	if err != nil {
		return nil, exitUsage, err
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "host reconcile: warning: %s\n", w)
	}
	l, err := openLedger(ctx, stateFlag, getenv)
	if err != nil {
		return nil, exitFailure, err
	}
	client := cloudapi.New(cloudURL, cloudClient(), "relay-host/"+agent.Version)
	tok, err := client.Token(ctx, shared.TokenRequest{HostID: creds.HostID, HostCredential: creds.HostCredential})
	if err != nil {
		l.Close()
		var ce *cloudapi.Error
		if errors.As(err, &ce) && (ce.Status == 401 || ce.Status == 410) {
			return nil, exitRevoked, fmt.Errorf("the cloud at %s refuses host %s's credential: %v", cloudURL, creds.HostID, err)
		}
		return nil, exitFailure, fmt.Errorf("the cloud at %s: %v", cloudURL, err)
	}
	return &reconciler{ledger: l, client: client, creds: creds, token: tok.Token}, exitOK, nil
}

// maxReconcile bounds the deliveries read from each side.
const maxReconcile = 100_000

func (r *reconciler) compare(ctx context.Context, since time.Time) ([]disagreement, error) {
	var cloud []shared.HostDelivery
	cursor := ""
	for {
		page, err := r.client.HostDeliveries(ctx, r.token, since, cursor)
		if err != nil {
			return nil, err
		}
		cloud = append(cloud, page.Webhooks...)
		if page.NextCursor == "" {
			break
		}
		if len(cloud) >= maxReconcile {
			return nil, fmt.Errorf("over %d deliveries since %s: give a later --since", maxReconcile, since.UTC().Format(time.RFC3339))
		}
		cursor = page.NextCursor
	}
	// The ledger's rows processed since: every delivery received since was
	// processed (if at all) since.
	var entries []ledger.Entry
	cursor = ""
	for {
		page, next, err := r.ledger.DeliveryList(ctx, ledger.ListParams{Since: since, Limit: 1000, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		entries = append(entries, page...)
		if next == "" {
			break
		}
		if len(entries) >= maxReconcile {
			return nil, fmt.Errorf("over %d ledger rows since %s: give a later --since", maxReconcile, since.UTC().Format(time.RFC3339))
		}
		cursor = next
	}
	outbox, err := r.ledger.OutboxList(ctx, maxReconcile)
	if err != nil {
		return nil, err
	}
	pending := make(map[string]bool, len(outbox))
	for _, ob := range outbox {
		if ob.Kind == ledger.OutboxAck {
			pending[ob.DeliveryID] = true
		}
	}
	return compare(cloud, entries, pending, since), nil
}

// fix sends, in one heartbeat that leases nothing, the acks the cloud is
// missing, each with the ledger's result of its run. It returns their ids.
func (r *reconciler) fix(ctx context.Context, found []disagreement) ([]string, error) {
	req := shared.HeartbeatRequest{AgentVersion: agent.Version, MaxWebhooks: shared.Ptr(0)}
	for _, d := range found {
		if !d.Fixable {
			continue
		}
		e, err := r.ledger.DeliveryGet(ctx, d.DeliveryID)
		if err != nil {
			return nil, err
		}
		req.WebhookAcks = append(req.WebhookAcks, d.DeliveryID)
		req.WebhookResults = append(req.WebhookResults, shared.WebhookResult{DeliveryID: e.DeliveryID, Attempt: e.CloudAttempt,
			Result: string(e.Result), Handler: e.Handler, ResponseStatus: e.ResponseStatus, ExitCode: e.ExitCode,
			DurationMS: e.DurationMS, Error: e.Error})
	}
	if len(req.WebhookAcks) == 0 {
		return nil, nil
	}
	if _, err := r.client.Heartbeat(ctx, r.token, req); err != nil {
		return nil, err
	}
	return req.WebhookAcks, nil
}
