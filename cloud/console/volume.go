package console

import (
	"context"
	"html/template"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
)

// volumeReader is what the volume page reads.
type volumeReader interface {
	DeliveryVolume(ctx context.Context, p *store.DeliveryVolumeParams) ([]store.VolumeHour, error)
	HostList(ctx context.Context) ([]*store.Host, error)
}

// volumeData is what the volume page shows: the relay's day and, when a
// host is picked, that host's.
type volumeData struct {
	Relay      volumeChart
	Host       *volumeChart // nil: no host picked
	Hosts      []hostLink
	NoSuchHost string // a host was asked that does not exist
}

// volumeChart is one chart with the day's totals by outcome beside it (the
// chart's numbers, readable without the picture).
type volumeChart struct {
	Title  string
	Chart  template.HTML
	Totals []outcomeTotal
}

type outcomeTotal struct {
	Outcome string
	Count   int
}

// hostLink is a host a page can be narrowed to.
type hostLink struct {
	ID, Name, Href string
	Current        bool
}

// loadVolume is the volume page's data: the relay's last 24 hours and
// those of the host asked (its id), if any.
func loadVolume(ctx context.Context, r volumeReader, hostID string, now time.Time) (*volumeData, error) {
	hosts, err := r.HostList(ctx)
	if err != nil {
		return nil, err
	}
	d := &volumeData{}
	relay, err := chartOf(ctx, r, "Webhooks per hour, last 24 hours, all hosts", "", now)
	if err != nil {
		return nil, err
	}
	d.Relay = *relay
	for _, h := range hosts {
		l := hostLink{ID: h.ID, Name: h.Name, Href: "/console/volume?host=" + url.QueryEscape(h.ID), Current: h.ID == hostID}
		d.Hosts = append(d.Hosts, l)
		if l.Current {
			if d.Host, err = chartOf(ctx, r, "Webhooks per hour, last 24 hours, host "+h.Name+" ("+h.ID+")", h.ID, now); err != nil {
				return nil, err
			}
		}
	}
	if hostID != "" && d.Host == nil {
		d.NoSuchHost = hostID
	}
	return d, nil
}

func chartOf(ctx context.Context, r volumeReader, title, hostID string, now time.Time) (*volumeChart, error) {
	hours, err := r.DeliveryVolume(ctx, &store.DeliveryVolumeParams{HostID: hostID, Now: now})
	if err != nil {
		return nil, err
	}
	c := &volumeChart{Title: title, Chart: VolumeChart(title, hours)}
	for _, s := range volumeSeries {
		n := 0
		for _, h := range hours {
			n += s.count(h)
		}
		c.Totals = append(c.Totals, outcomeTotal{Outcome: s.name, Count: n})
	}
	return c, nil
}

func (cn *Console) volumePage(c *gin.Context) {
	d, err := loadVolume(c.Request.Context(), cn.d.Store, c.Query("host"), cn.now())
	if err != nil {
		cn.fail(c, err)
		return
	}
	cn.render(c, 200, "volume", &page{Title: "Volume", Nav: "volume", Data: d})
}

// ReceivedPerHour is Deps.Volume read from the store: the hosts'
// webhooks received per hour over the last 24 hours
// (store.DeliveryVolumeByHost).
func ReceivedPerHour(st store.VolumeStore) func(ctx context.Context, now time.Time, hostIDs []string) (map[string][]int, error) {
	return func(ctx context.Context, now time.Time, hostIDs []string) (map[string][]int, error) {
		return st.DeliveryVolumeByHost(ctx, &store.DeliveryVolumeParams{Now: now, HostIDs: hostIDs})
	}
}
