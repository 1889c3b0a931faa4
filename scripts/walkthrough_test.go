package scripts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// walkthroughMark precedes each README code block the walkthrough test runs.
const walkthroughMark = "<!-- walkthrough -->"

// walkthroughBlocks returns the README's marked ```sh blocks, in order.
func walkthroughBlocks(t *testing.T, readme string) []string {
	t.Helper()
	var blocks []string
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != walkthroughMark {
			continue
		}
		require.Less(t, i+1, len(lines))
		require.Equal(t, "```sh", strings.TrimSpace(lines[i+1]), "README line %d: %s must be followed by a ```sh block", i+1, walkthroughMark)
		var block []string
		for i += 2; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			block = append(block, lines[i])
		}
		require.Less(t, i, len(lines), "an unclosed walkthrough block")
		blocks = append(blocks, strings.Join(block, "\n"))
	}
	return blocks
}

// TestWalkthrough runs the README's "Five minutes with the real flow" as
// written: every block marked <!-- walkthrough -->, in order, in one bash
// with -euo pipefail, from the checkout, on free ports, with its scratch
// directory under a temporary TMPDIR. Then it checks what the walkthrough
// says happened: the receiver got the sample once, and the repeat was
// answered duplicate.
func TestWalkthrough(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	blocks := walkthroughBlocks(t, string(readme))
	require.GreaterOrEqual(t, len(blocks), 5, "the README's walkthrough blocks")
	script := "set -euo pipefail\n" + strings.Join(blocks, "\n") + "\n"

	ports := freePorts(t, 3)
	tmp := filepath.Join(t.TempDir(), "tmp")
	require.NoError(t, os.Mkdir(tmp, 0o700))
	env := []string{
		fmt.Sprintf("RELAY_DEMO_PORT=%d", ports[0]),
		fmt.Sprintf("RELAY_DEMO_RECEIVER_PORT=%d", ports[1]),
		fmt.Sprintf("RELAY_DEMO_HOST_PORT=%d", ports[2]),
		"TMPDIR=" + tmp,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a cold build included
	defer cancel()

	s := startScript(t, root, env, "bash", "-c", script)
	select {
	case <-s.done:
	case <-ctx.Done():
		t.Fatalf("the walkthrough is still running; output:\n%s", s.out)
	}
	out := s.out.String()
	require.Equal(t, 0, s.cmd.ProcessState.ExitCode(), "the walkthrough's exit code; output:\n%s", out)
	require.Regexp(t, `"status":"queued"`, out)
	require.Regexp(t, `"status":"duplicate"`, out)

	scratch, err := filepath.Glob(filepath.Join(tmp, "tmp.*", "receiver.log"))
	require.NoError(t, err)
	require.Len(t, scratch, 1, "the walkthrough's scratch directory, under TMPDIR")
	got, err := os.ReadFile(scratch[0])
	require.NoError(t, err)
	m := regexp.MustCompile(`receiver: POST /github  delivery=(github:demo-1:\d+) `).FindAllStringSubmatch(string(got), -1)
	require.Len(t, m, 1, "the receiver got the sample once; its log:\n%s", got)
	require.Contains(t, out, fmt.Sprintf(`"delivery_id":"%s"`, m[0][1]))
}
