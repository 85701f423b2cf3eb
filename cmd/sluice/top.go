package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
)

// top: a live view of the sidecar from its STATS reply, refreshed in the
// terminal.

func runTop(x *cli, args []string) int {
	fs := x.flags("top")
	interval := durationFlag(fs, "interval", time.Second, "refresh every `D`")
	once := fs.Bool("once", false, "print one view (rates over one interval) and exit, without clearing the screen")
	metricsAddr := fs.String("metrics", "", "also read the sidecar's metrics at `ADDR` (sluiced --metrics: host:port or unix:PATH) for each named limit's overrides")
	if _, code, ok := x.parse("top", fs, args, 0, 0); !ok {
		return code
	}
	if *interval < 10*time.Millisecond {
		return x.fail("top: --interval %v: want at least 10ms", *interval)
	}
	c, code, ok := x.dial("top")
	if !ok {
		return code
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *metricsAddr != "" {
		x.metrics, x.metricsURL = metricsGetter(*metricsAddr)
	}
	prev, err := x.sample(c)
	if err != nil {
		return x.failCmd("top", err)
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return exitOK
		case <-tick.C:
		}
		cur, err := x.sample(c)
		if err != nil {
			return x.failCmd("top", err)
		}
		if !*once {
			fmt.Fprint(x.stdout, "\x1b[H\x1b[2J") // home, clear
		}
		render(x.stdout, x.socket, prev, cur)
		if *once {
			return exitOK
		}
		prev = cur
	}
}

// snapshot is one STATS reply, when it was taken and the ping round trip,
// and the overrides' series with --metrics.
type snapshot struct {
	at        time.Time
	stats     map[string]uint64
	rtt       time.Duration
	overrides *overrideView
}

func (x *cli) sample(c *sluice.Client) (snapshot, error) {
	cx, cancel := x.callContext()
	defer cancel()
	start := time.Now()
	if err := c.Ping(cx); err != nil {
		return snapshot{}, err
	}
	rtt := time.Since(start)
	st, err := c.Stats(cx)
	if err != nil {
		return snapshot{}, err
	}
	s := snapshot{at: time.Now(), stats: st, rtt: rtt}
	if x.metrics != nil {
		s.overrides, err = x.scrapeOverrides(x.metrics, x.metricsURL)
	}
	return s, err
}

// render writes one view: rates between prev and cur, and cur's levels.
func render(w io.Writer, socket string, prev, cur snapshot) {
	secs := cur.at.Sub(prev.at).Seconds()
	rate := func(name string) float64 {
		d := cur.stats[name] - prev.stats[name]
		if cur.stats[name] < prev.stats[name] { // the sidecar restarted
			d = cur.stats[name]
		}
		return float64(d) / secs
	}
	v := func(name string) uint64 { return cur.stats[name] }
	decided := rate("allowed") + rate("denied")
	denyPct := 0.0
	if decided > 0 {
		denyPct = 100 * rate("denied") / decided
	}
	load := 0.0
	if v("slot_count") > 0 {
		load = float64(v("used_slots")) / float64(v("slot_count"))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sluice top  %s  %s  (every %v; ctrl-c quits)\n\n", socket, cur.at.Format("15:04:05"), cur.at.Sub(prev.at).Round(time.Millisecond))
	fmt.Fprintf(&b, "decisions/s  %10.0f   allowed/s %10.0f   denied/s %10.0f   (%.1f%% denied)\n", decided, rate("allowed"), rate("denied"), denyPct)
	fmt.Fprintf(&b, "requests/s   %10.0f   frames/s  %10.0f   errors/s %10.0f   malformed/s %.0f\n", rate("ops"), rate("frames"), rate("errors"), rate("malformed"))
	fmt.Fprintf(&b, "connections  %10d   opened/s  %10.0f   rejected/s %8.0f   peers denied/s %.0f\n", v("connections"), rate("connections_total"), rate("connections_rejected"), rate("peers_denied"))
	fmt.Fprintf(&b, "table        %10s slots of %d bytes   load %.3f (%s used)\n", thousands(v("slot_count")), v("slot_size"), load, thousands(v("used_slots")))
	fmt.Fprintf(&b, "buckets      inserts/s %8.0f   reclaims/s %8.0f   table full %s (+%.0f/s)   torn %s\n", rate("inserts"), rate("reclaims"), thousands(v("table_full")), rate("table_full"), thousands(v("torn_slots")))
	fmt.Fprintf(&b, "sync         %s syncs, %s errors (+%.0f/s)\n", thousands(v("syncs")), thousands(v("sync_errors")), rate("sync_errors"))
	if _, ok := cur.stats["overrides"]; ok {
		fmt.Fprintf(&b, "overrides    %10s in force   decided/s %10.0f\n", thousands(v("overrides")), rate("override_decisions"))
		if cur.overrides != nil && prev.overrides != nil {
			renderOverrides(&b, secs, prev.overrides, cur.overrides)
		}
	}
	fmt.Fprintf(&b, "latency      ping round trip %v\n", cur.rtt.Round(time.Microsecond))
	io.WriteString(w, b.String())
}
