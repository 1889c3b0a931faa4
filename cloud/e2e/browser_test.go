package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// Pages are tested in a real headless Chromium driven by chromedp. make test
// installs Debian's chromium when it is missing and sets
// RELAY_REQUIRE_BROWSER=1, so there a missing browser fails the test; a plain
// `go test` without one skips the browser tests.

// chromiumPath finds the browser: $RELAY_CHROMIUM, then the usual names.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RELAY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("RELAY_REQUIRE_BROWSER") == "1" {
		t.Fatal("no Chromium found (RELAY_REQUIRE_BROWSER=1): install Debian's chromium or set RELAY_CHROMIUM")
	}
	t.Skip("no Chromium on this machine: make test installs it; set RELAY_CHROMIUM to use another")
	return ""
}

// newBrowser starts a headless Chromium with its own empty profile and
// returns a tab's context; everything is closed when the test ends. Each
// action a test runs should carry its own timeout (browserTimeout).
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// Start the browser now, so a browser that cannot start fails here. The
	// first action must run on the tab's own context: cancelling the context
	// of the action that started the browser would close the browser.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		require.NoError(t, err, "start Chromium")
	case <-time.After(60 * time.Second):
		t.Fatal("Chromium did not start within 60s")
	}
	return ctx
}

// browserTimeout bounds one step of a browser test.
const browserTimeout = 30 * time.Second

// do runs chromedp steps on the tab with browserTimeout and fails the test
// on error.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	step, cancel := context.WithTimeout(ctx, browserTimeout)
	defer cancel()
	require.NoError(t, chromedp.Do(step, steps...), what)
}

// get runs one chromedp action that returns a value (a text, an attribute,
// an evaluation) with browserTimeout and fails the test on error.
func get[T any](t *testing.T, ctx context.Context, what string, action chromedp.Action[T]) T {
	t.Helper()
	step, cancel := context.WithTimeout(ctx, browserTimeout)
	defer cancel()
	v, err := chromedp.Run(step, action)
	require.NoError(t, err, what)
	return v
}

// screenshotDir is where page screenshots go: $RELAY_SCREENSHOT_DIR (make
// test sets it and prints it at the end), else a folder in the system's
// temporary directory. It is not removed after the run: it is for a person.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("RELAY_SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "relay-screenshots")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// screenshot writes the whole page as <dir>/<test>-<name>.png and logs the
// path.
func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	// Quality 100 is PNG, as the file is named; below it chromedp encodes JPEG.
	png := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	file := unsafeFileChars.ReplaceAllString(t.Name()+"-"+name, "_") + ".png"
	path := filepath.Join(screenshotDir(t), file)
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
	return path
}
