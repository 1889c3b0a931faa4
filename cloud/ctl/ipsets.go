package ctl

import (
	"context"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/relaykit/relay/shared"
)

func ipsetsList(ctx context.Context, e *env, args []string, auth func() error) error {
	type answer struct {
		Sets []shared.IPSet `json:"ip_sets"`
	}
	return listTable(ctx, e, args, auth, "ipsets list [--json]", "/api/ipsets", func(a *answer) []shared.IPSet { return a.Sets },
		[]string{"NAME", "SIZE", "TAKEN", "REFRESHED", "CHECKED", "ORIGIN", "LAST ERROR"}, func(s shared.IPSet) []string {
			return []string{s.Name, strconv.Itoa(s.Size), e.ago(s.TakenAt), e.ago(s.RefreshedAt), e.ago(s.CheckedAt),
				orDash(s.Origin), orDash(cut(s.LastError, 80))}
		})
}

// maxIPSetFile bounds the file ipsets refresh reads.
const maxIPSetFile = 4 << 20

func ipsetsRefresh(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, `ipsets refresh NAME --file FILE|- [--json]  (CIDRs and IPs one a line, or the provider's JSON as published)`)
	file := f.String("file", "", `the set as published ("-": standard input)`)
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if *file == "" {
		return usagef("ipsets refresh: --file FILE|- is required")
	}
	r := e.stdin
	if *file != "-" {
		fh, err := os.Open(*file)
		if err != nil {
			return usagef("--file: %v", err)
		}
		defer fh.Close()
		r = fh
	}
	data, err := io.ReadAll(io.LimitReader(r, maxIPSetFile+1))
	if err != nil {
		return usagef("--file: %v", err)
	}
	if len(data) > maxIPSetFile {
		return usagef("--file %s is over %d bytes", *file, maxIPSetFile)
	}
	if err := auth(); err != nil {
		return err
	}
	var s shared.IPSet
	if done, err := e.fetch(ctx, "PUT", "/api/ipsets/"+url.PathEscape(pos[0]), nil, map[string]string{"data": string(data)}, &s); done {
		return err
	}
	e.table([]string{"FIELD", "VALUE"}, [][]string{
		{"name", s.Name}, {"size", strconv.Itoa(s.Size)}, {"origin", s.Origin}, {"refreshed", e.ago(s.RefreshedAt)},
		{"prefixes", cut(strings.Join(s.Prefixes, ", "), 200)},
	})
	return nil
}
