package alert

import (
	"strconv"
	"strings"
	"time"
)

// count is n and its noun, plural unless n is 1: "1 webhook", "3 webhooks".
// The plural adds an s: every noun an alert counts takes one.
func count[N int | int64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(int64(n), 10) + " " + noun + "s"
}

// units are the units a span is said in, largest first.
var units = []struct {
	d    time.Duration
	name string
}{{24 * time.Hour, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"}}

// parts is d in its two largest units, what is below them dropped.
func parts(d time.Duration) []string {
	var out []string
	for _, u := range units {
		if n := d / u.d; n > 0 && len(out) < 2 {
			out = append(out, count(int64(n), u.name))
			d -= n * u.d
		} else if len(out) > 0 {
			break // "1 day 5 minutes" would skip a unit: say "1 day"
		}
	}
	return out
}

// span says a duration as people do: "an hour", "15 minutes", "1 hour 30
// minutes", "2 days", "less than a second".
func span(d time.Duration) string {
	p := parts(d)
	switch {
	case len(p) == 0:
		return "less than a second"
	case len(p) == 1 && strings.HasPrefix(p[0], "1 "):
		return article(p[0][2:])
	}
	return strings.Join(p, " ")
}

// inLast says the window ending now of length d: "in the last hour", "in
// the last 15 minutes".
func inLast(d time.Duration) string {
	p := parts(d)
	if len(p) == 1 && strings.HasPrefix(p[0], "1 ") {
		return "in the last " + p[0][2:]
	}
	return "in the last " + span(d)
}

func article(unit string) string {
	if unit == "hour" {
		return "an hour"
	}
	return "a " + unit
}
