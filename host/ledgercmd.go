package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/relaykit/relay/host/config"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/host/localapi"
)

// runLedger is `host ledger list|show`: it reads the ledger of the state
// directory, read-only, while `host run` may be writing it.
func runLedger(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if wantsHelp(args) {
		fmt.Fprintf(stdout, "usage:\n  %s\n  %s\n\nhost ledger list -h and host ledger show -h print each one's flags.\n",
			synopsis("ledger list"), synopsis("ledger show"))
		return exitOK
	}
	return dispatch(ctx, args, stdout, stderr, getenv, "host ledger", "host ledger: list or show?\n",
		map[string]command{"list": ledgerList, "show": ledgerShow})
}

// parseInterspersed parses flags that may come before or after the
// positional arguments, and returns those.
// printJSON prints v as indented JSON, as --json asks.
func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// parseNoArgs parses the flags of a command that takes no other argument,
// as parseInterspersed does; ok is false when the command is over, code its
// exit code (a stray argument is a usage error, said on fs's output).
func parseNoArgs(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, ok bool) {
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return flagExit(fs, err, stdout), false
	}
	if len(rest) > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), rest[0])
		return exitUsage, false
	}
	return exitOK, true
}

func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func openLedger(ctx context.Context, stateFlag string, getenv func(string) string) (*ledger.Ledger, error) {
	dir, err := config.StateDir(stateFlag, getenv)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, ledgerFile)
	l, err := ledger.OpenReadOnly(ctx, path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no ledger at %s: `host run` has not run with this state directory (--state, $%s)", path, config.EnvState)
	}
	return l, err
}

func ledgerList(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("ledger list", stderr)
	stateFlag := fs.String("state", "", "state directory")
	result := fs.String("result", "", "success, error or skipped")
	source := fs.String("source", "", "only this source")
	since := fs.String("since", "", "processed since: a duration (1h) or an RFC 3339 time")
	limit := fs.Int("limit", localapi.DefaultLimit, "at most this many, newest first")
	cursor := fs.String("cursor", "", "continue after a previous page")
	asJSON := fs.Bool("json", false, "print JSON")
	if code, ok := parseNoArgs(fs, args, stdout); !ok {
		return code
	}
	p := ledger.ListParams{Source: *source, Limit: *limit, Cursor: *cursor, Result: ledger.Result(*result)}
	if *result != "" && !p.Result.Valid() {
		fmt.Fprintf(stderr, "host ledger list: --result %q: want success, error or skipped\n", *result)
		return exitUsage
	}
	if *limit < 1 || *limit > localapi.MaxLimit {
		fmt.Fprintf(stderr, "host ledger list: --limit %d: want 1 to %d\n", *limit, localapi.MaxLimit)
		return exitUsage
	}
	if *since != "" {
		var err error
		if p.Since, err = ledger.ParseSince(*since, time.Now()); err != nil {
			fmt.Fprintf(stderr, "host ledger list: --since: %v\n", err)
			return exitUsage
		}
	}
	l, err := openLedger(ctx, *stateFlag, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "host ledger list: %v\n", err)
		return exitFailure
	}
	defer l.Close()
	entries, next, err := l.DeliveryList(ctx, p)
	if errors.Is(err, ledger.ErrInvalidCursor) {
		fmt.Fprint(stderr, "host ledger list: --cursor: not one a previous page printed\n")
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "host ledger list: %v\n", err)
		return exitFailure
	}
	if *asJSON {
		printJSON(stdout, struct {
			Entries    []ledger.Entry `json:"entries"`
			NextCursor string         `json:"next_cursor"`
		}{entries, next})
		return exitOK
	}
	if len(entries) == 0 {
		fmt.Fprintln(stdout, "no deliveries")
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESSED\tRESULT\tSOURCE\tEVENT\tTRIES\tTOOK\tDELIVERY\tSUMMARY / ERROR")
	for _, e := range entries {
		event := e.EventType
		if e.EventAction != "" {
			event += "." + e.EventAction
		}
		note := e.Summary
		switch e.Result {
		case ledger.ResultError:
			note = e.Error
		case ledger.ResultSkipped:
			note = e.Output
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n",
			e.ProcessedAt.UTC().Format(time.RFC3339), terminalSafe(string(e.Result), ""), oneLine(e.Source, 64),
			oneLine(event, 40), e.Attempts, time.Duration(e.DurationMS)*time.Millisecond, oneLine(e.DeliveryID, 300), oneLine(note, 80))
	}
	tw.Flush()
	if next != "" {
		fmt.Fprintf(stdout, "more: add --cursor %s\n", next)
	}
	return exitOK
}

func ledgerShow(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("ledger show", stderr)
	stateFlag := fs.String("state", "", "state directory")
	asJSON := fs.Bool("json", false, "print JSON")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return flagExit(fs, err, stdout)
	}
	if len(rest) != 1 {
		fmt.Fprint(stderr, "host ledger show: give one delivery id\n")
		return exitUsage
	}
	l, err := openLedger(ctx, *stateFlag, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "host ledger show: %v\n", err)
		return exitFailure
	}
	defer l.Close()
	e, err := l.DeliveryGet(ctx, rest[0])
	if errors.Is(err, ledger.ErrNotFound) {
		fmt.Fprintf(stderr, "host ledger show: delivery %q is not in the ledger\n", rest[0])
		return exitFailure
	}
	if err != nil {
		fmt.Fprintf(stderr, "host ledger show: %v\n", err)
		return exitFailure
	}
	if *asJSON {
		printJSON(stdout, e)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", terminalSafe(k, ""), terminalSafe(v, ""))
		}
	}
	row("delivery", e.DeliveryID)
	row("source", e.Source)
	row("event", strings.TrimSuffix(e.EventType+"."+e.EventAction, "."))
	row("result", string(e.Result))
	row("error", e.Error)
	row("summary", e.Summary)
	row("handler", e.Handler)
	if e.ResponseStatus != nil {
		row("response status", strconv.Itoa(*e.ResponseStatus))
	}
	if e.ExitCode != nil {
		row("exit code", strconv.Itoa(*e.ExitCode))
	}
	row("attempts", fmt.Sprintf("%d here (cloud attempt %d)", e.Attempts, e.CloudAttempt))
	if !e.ReceivedAt.IsZero() {
		row("received", e.ReceivedAt.UTC().Format(time.RFC3339Nano))
	}
	row("processed", e.ProcessedAt.UTC().Format(time.RFC3339Nano))
	row("took", (time.Duration(e.DurationMS) * time.Millisecond).String())
	row("correlation id", e.CorrelationID)
	keys := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row(k, e.Fields[k])
	}
	tw.Flush()
	if e.Output != "" {
		fmt.Fprintf(stdout, "output:\n  %s\n", strings.ReplaceAll(terminalSafe(e.Output, "\n\t"), "\n", "\n  "))
	}
	return exitOK
}

// oneLine flattens s for a table cell and cuts it to n runes, its control
// characters escaped (see terminalSafe).
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return terminalSafe(s, "")
}

// terminalSafe writes what the ledger holds for a terminal: a webhook's
// payload, a target's answer and a program's output are anyone's text, and
// an escape sequence in them would drive the operator's terminal (rewrite
// the screen, set the title, hide lines). Control characters other than
// those in keep, bidirectional overrides and invalid UTF-8 are written
// Go-quoted, as \x1b, \u202e or \xff.
func terminalSafe(s, keep string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return !strings.ContainsRune(keep, r) && unsafeForTerminal(r) }) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case strings.ContainsRune(keep, r) || !unsafeForTerminal(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

func unsafeForTerminal(r rune) bool {
	return r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}
