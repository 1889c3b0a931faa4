package scripts

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// readmeMaxLines bounds the README: what the project is, the two commands,
// the walkthrough and where to read next; the reference lives in docs/.
const readmeMaxLines = 300

// mdLink is a Markdown link or image target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// mdHeading is an ATX heading.
var mdHeading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// outsideFences calls fn with each line of a Markdown text that is not in
// a fenced code block, and its 1-based number.
func outsideFences(text string, fn func(n int, line string)) {
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			fn(i+1, line)
		}
	}
}

// headingSlug is the anchor GitHub gives a heading: lower case, every
// character but letters, digits, spaces, hyphens and underscores dropped,
// spaces turned into hyphens.
func headingSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown text's headings; a repeated
// heading gets -1, -2, … as on GitHub.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	outsideFences(text, func(_ int, line string) {
		m := mdHeading.FindStringSubmatch(line)
		if m == nil {
			return
		}
		s := headingSlug(m[1])
		if n, ok := seen[s]; ok {
			seen[s] = n + 1
			s = fmt.Sprintf("%s-%d", s, n+1)
		} else {
			seen[s] = 0
		}
		out[s] = true
	})
	return out
}

// docPages are README.md and every page of docs/, relative to root.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	out := []string{"README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		require.NoError(t, err)
		out = append(out, rel)
	}
	return out
}

// TestDocLinks: every relative link and image of README.md and docs/*.md
// names a file or directory that exists, and every anchor a heading of the
// page it points into.
func TestDocLinks(t *testing.T) {
	root, err := rig.RepoRoot()
	require.NoError(t, err)
	headings := map[string]map[string]bool{} // by path relative to root
	headingsOf := func(rel string) map[string]bool {
		if h, ok := headings[rel]; ok {
			return h
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		headings[rel] = anchors(string(b))
		return headings[rel]
	}
	for _, page := range docPages(t, root) {
		b, err := os.ReadFile(filepath.Join(root, page))
		require.NoError(t, err)
		links := 0
		outsideFences(string(b), func(n int, line string) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, frag, _ := strings.Cut(target, "#")
				rel := page
				if path != "" {
					rel = filepath.Clean(filepath.Join(filepath.Dir(page), path))
					_, err := os.Stat(filepath.Join(root, rel))
					require.NoError(t, err, "%s:%d: %s names no file", page, n, target)
				}
				if frag == "" {
					continue
				}
				require.True(t, strings.HasSuffix(rel, ".md"), "%s:%d: %s: an anchor into a file that is not Markdown", page, n, target)
				require.True(t, headingsOf(rel)[frag], "%s:%d: %s: %s has no heading #%s", page, n, target, rel, frag)
			}
		})
		require.NotZero(t, links, "%s links nowhere", page)
	}
}

// TestReadmeIsAFrontDoor: README.md stays short and links every page of
// docs/.
func TestReadmeIsAFrontDoor(t *testing.T) {
	root, err := rig.RepoRoot()
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	readme := string(b)
	lines := strings.Count(readme, "\n")
	require.Less(t, lines, readmeMaxLines, "README.md has %d lines: the reference goes in docs/", lines)
	linked := map[string]bool{}
	outsideFences(readme, func(_ int, line string) {
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			path, _, _ := strings.Cut(m[1], "#")
			linked[filepath.Clean(path)] = true
		}
	})
	for _, page := range docPages(t, root)[1:] {
		require.True(t, linked[page], "README.md links no %s", page)
	}
}

func TestHeadingSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"The public edge": "the-public-edge",
		"Measured: `make bench`, `make chaos` and `make soak`": "measured-make-bench-make-chaos-and-make-soak",
		"Deliveries: states, retries and upkeep":               "deliveries-states-retries-and-upkeep",
		"An incident, start to end":                            "an-incident-start-to-end",
		"The command line: `cloud ctl`":                        "the-command-line-cloud-ctl",
	} {
		require.Equal(t, want, headingSlug(heading), heading)
	}
}
