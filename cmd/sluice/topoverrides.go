package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// top's override view: from the sidecar's metrics (sluiced --metrics),
// how many overrides each named limit has and which of them decided in
// the interval.

// overrideView is one scrape's override series.
type overrideView struct {
	n         map[string]uint64 // overrides in force, by limit
	decisions map[[2]string]overrideCounts
}

// overrideCounts are one override's decisions since the sidecar started.
type overrideCounts struct{ allowed, denied, failed uint64 }

// metricsGetter fetches /metrics from addr, a host:port or unix:PATH as
// sluiced's --metrics takes it.
func metricsGetter(addr string) (*http.Client, string) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		return &http.Client{Transport: tr}, "http://sluiced/metrics"
	}
	return &http.Client{}, "http://" + addr + "/metrics"
}

// scrapeOverrides reads the override series from the sidecar's metrics.
func (x *cli) scrapeOverrides(hc *http.Client, addr string) (*overrideView, error) {
	ctx, cancel := x.callContext()
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err
	}
	if err != nil {
		return nil, fmt.Errorf("the metrics (--metrics) did not answer: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the metrics (--metrics) answered %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("the metrics (--metrics): %w", err)
	}
	v := &overrideView{n: map[string]uint64{}, decisions: map[[2]string]overrideCounts{}}
	label := func(ls []*dto.LabelPair, name string) string {
		for _, l := range ls {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	if f := fams["sluice_overrides"]; f != nil {
		for _, m := range f.Metric {
			v.n[label(m.Label, "limit")] = uint64(m.GetGauge().GetValue())
		}
	}
	if f := fams["sluice_override_decisions_total"]; f != nil {
		for _, m := range f.Metric {
			k := [2]string{label(m.Label, "limit"), label(m.Label, "override")}
			c, n := v.decisions[k], uint64(m.GetCounter().GetValue())
			switch label(m.Label, "outcome") {
			case "allowed":
				c.allowed += n
			case "denied":
				c.denied += n
			default:
				c.failed += n
			}
			v.decisions[k] = c
		}
	}
	return v, nil
}

// topOverrides is how many overrides of a limit top shows, the busiest.
const topOverrides = 3

// renderOverrides writes, per limit with overrides, how many it has and
// the busiest overrides between prev and cur, with their rates.
func renderOverrides(b *strings.Builder, secs float64, prev, cur *overrideView) {
	if cur == nil {
		return
	}
	limits := make([]string, 0, len(cur.n))
	for l := range cur.n {
		limits = append(limits, l)
	}
	slices.Sort(limits)
	type row struct {
		pattern         string
		decided, denied float64
	}
	for _, l := range limits {
		var rows []row
		for k, c := range cur.decisions {
			if k[0] != l {
				continue
			}
			p := prev.decisions[k]
			d := func(a, b uint64) float64 {
				if a < b { // the sidecar restarted
					return float64(a) / secs
				}
				return float64(a-b) / secs
			}
			r := row{k[1], d(c.allowed+c.denied+c.failed, p.allowed+p.denied+p.failed), d(c.denied, p.denied)}
			if r.decided > 0 {
				rows = append(rows, r)
			}
		}
		slices.SortFunc(rows, func(a, b row) int {
			if a.decided != b.decided {
				if a.decided > b.decided {
					return -1
				}
				return 1
			}
			return strings.Compare(a.pattern, b.pattern)
		})
		fmt.Fprintf(b, "  %-12s %d overrides", l, cur.n[l])
		if len(rows) == 0 {
			b.WriteString(", none decided\n")
			continue
		}
		b.WriteString(", deciding/s:")
		for i, r := range rows[:min(len(rows), topOverrides)] {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(b, " %q %.0f (%.0f denied)", r.pattern, r.decided, r.denied)
		}
		if len(rows) > topOverrides {
			fmt.Fprintf(b, ", %d more", len(rows)-topOverrides)
		}
		b.WriteByte('\n')
	}
}
