// Package monitoring_test checks the Prometheus rules and the Grafana
// dashboard shipped in this directory against the built-in alert rules and
// the metrics the binaries document.
package monitoring_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/relaykit/relay/cloud/alert"
)

var metricName = regexp.MustCompile(`relay_[a-z0-9_]+`)

// documented returns the metric names README.md and docs/ document, and
// checks that every metric of the alert evaluator is among them.
func documented(t *testing.T) map[string]bool {
	pages, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	names := map[string]bool{}
	for _, page := range append([]string{"../../README.md"}, pages...) {
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		for _, n := range metricName.FindAllString(string(text), -1) {
			names[n] = true
		}
	}
	ch := make(chan *prometheus.Desc, 100)
	for _, c := range alert.New(nil, nil, alert.Config{}, nil, nil).Metrics().Collectors() {
		c.Describe(ch)
	}
	close(ch)
	descName := regexp.MustCompile(`fqName: "([a-z0-9_]+)"`)
	for d := range ch {
		m := descName.FindStringSubmatch(d.String())
		require.NotNil(t, m, d.String())
		require.True(t, names[m[1]], "%s is documented in README.md or docs/", m[1])
	}
	return names
}

// base strips a histogram's series suffix.
func base(name string) string {
	for _, s := range []string{"_bucket", "_count", "_sum"} {
		if len(name) > len(s) && name[len(name)-len(s):] == s {
			return name[:len(name)-len(s)]
		}
	}
	return name
}

func TestPrometheusRules(t *testing.T) {
	names := documented(t)
	b, err := os.ReadFile("prometheus-rules.yml")
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Expr   string            `yaml:"expr"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f))
	covered := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert)
			covered[r.Labels["rule"]] = true
			refs := metricName.FindAllString(r.Expr, -1)
			require.NotEmpty(t, refs, r.Alert)
			for _, n := range refs {
				require.True(t, names[base(n)], "%s: %s is a documented metric", r.Alert, n)
			}
		}
	}
	for _, r := range alert.Rules {
		require.True(t, covered[r.Name], "built-in rule %s has a Prometheus rule", r.Name)
	}
}

func TestGrafanaDashboard(t *testing.T) {
	names := documented(t)
	b, err := os.ReadFile("grafana-dashboard.json")
	require.NoError(t, err)
	var d struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(b, &d))
	require.NotEmpty(t, d.Panels)
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			for _, n := range metricName.FindAllString(tg.Expr, -1) {
				require.True(t, names[base(n)], "%s: %s is a documented metric", p.Title, n)
			}
		}
	}
}
