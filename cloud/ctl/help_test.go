package ctl

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ctlRun runs `cloud ctl ARGS` with no token and no cloud.
func ctlRun(args ...string) (code int, stdout, stderr string) {
	var out, errs bytes.Buffer
	code = Run(context.Background(), args, strings.NewReader(""), &out, &errs, func(string) string { return "" })
	return code, out.String(), errs.String()
}

var flagLine = regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)\b`)

// TestEveryCommandHelp: every command answers -h, -help and --help with its
// own usage and all its flags, on stdout, exit 0, without a token or a
// cloud; its usage line names every flag it takes, and `cloud ctl --help`
// (and its group's -h) shows that same line.
func TestEveryCommandHelp(t *testing.T) {
	_, top, _ := ctlRun("--help")
	require.Contains(t, top, "--url URL")
	require.Contains(t, top, "--token-file FILE")
	leaves := 0
	for _, c := range commandList {
		paths := [][]string{{c.name}}
		if c.subs != nil {
			paths = nil
			for _, sub := range c.subs {
				paths = append(paths, []string{c.name, sub.name})
			}
			code, out, errs := ctlRun(c.name, "-h")
			require.Equal(t, ExitOK, code, "%s -h: %s", c.name, errs)
			require.True(t, strings.HasPrefix(out, "usage: cloud ctl "+c.name+" <"), "%s -h:\n%s", c.name, out)
		}
		for _, path := range paths {
			name := strings.Join(path, " ")
			for _, h := range []string{"-h", "-help", "--help"} {
				code, out, errs := ctlRun(append(path, h)...)
				require.Equal(t, ExitOK, code, "%s %s: %s", name, h, errs)
				require.Empty(t, errs, "%s %s", name, h)
				use, _, _ := strings.Cut(out, "\n")
				require.True(t, strings.HasPrefix(use, "usage: cloud ctl "+name+" ") || use == "usage: cloud ctl "+name,
					"%s %s: its own usage first:\n%s", name, h, out)
				flags := flagLine.FindAllStringSubmatch(out, -1)
				require.NotEmpty(t, flags, "%s %s lists its flags:\n%s", name, h, out)
				synopsis := strings.TrimPrefix(use, "usage: cloud ctl ")
				for _, f := range flags {
					if f[1] != "json" { // every command takes it: the usage says so once
						require.Contains(t, synopsis, "--"+f[1], "%s: its usage line names --%s", name, f[1])
					}
				}
				require.Contains(t, top, "\n  "+synopsis+"\n", "cloud ctl --help shows %s as its -h does", name)
				if len(path) == 2 {
					_, group, _ := ctlRun(path[0], "-h")
					require.Contains(t, group, "\n  "+synopsis+"\n", "%s -h shows %s", path[0], name)
				}
			}
			leaves++
		}
	}
	require.Equal(t, 43, leaves, "every command was asked")
	for _, h := range []string{"-h", "--help", "help"} {
		code, out, errs := ctlRun(h)
		require.Equal(t, ExitOK, code, errs)
		require.Equal(t, top, out)
	}
}
