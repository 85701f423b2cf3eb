package compare

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// The chart: for each scenario, a bar per target deciding the token
// bucket (and the echo floor), throughput on the left and p99 on the
// right, both on log scales (the targets span four orders of magnitude).

var familyColor = map[string]string{
	"sluice":     "#1f6feb",
	"redis":      "#d1242f",
	"in-process": "#8c959f",
	"echo":       "#24292f",
}

// WriteSVG draws the Go side's token-bucket cells and the echo floor.
func (r *Report) WriteSVG(w io.Writer) error {
	type row struct {
		label string
		c     *Cell
	}
	type group struct {
		title string
		rows  []row
	}
	var groups []group
	for _, sc := range r.Scenarios {
		g := group{title: sc.Name + ": " + sc.shape()}
		for i := range r.Cells {
			c := &r.Cells[i]
			if c.Lang != "go" || c.Scenario != sc.Name || c.Skipped != "" || c.Ops == 0 {
				continue
			}
			if c.Limit == string(TokenBucket) || c.Family == "echo" {
				label := c.Target
				if c.Family == "redis" {
					label += " + Lua"
				}
				g.rows = append(g.rows, row{label, c})
			}
		}
		if len(g.rows) > 0 {
			groups = append(groups, g)
		}
	}
	// Log axes spanning whole decades around the data.
	lo, hi := math.Inf(1), math.Inf(-1)
	plo, phi := math.Inf(1), math.Inf(-1)
	for _, g := range groups {
		for _, rw := range g.rows {
			lo, hi = math.Min(lo, rw.c.OpsPerSec), math.Max(hi, rw.c.OpsPerSec)
			p := float64(max(rw.c.P99, 1))
			plo, phi = math.Min(plo, p), math.Max(phi, p)
		}
	}
	if len(groups) == 0 {
		lo, hi, plo, phi = 1, 10, 1, 10
	}
	tLo, tHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	pLo, pHi := math.Floor(math.Log10(plo)), math.Ceil(math.Log10(phi))
	if tHi == tLo {
		tHi++
	}
	if pHi == pLo {
		pHi++
	}

	const (
		width   = 1000
		labelW  = 190
		panelW  = 360
		gap     = 40
		rowH    = 18
		groupH  = 26
		top     = 64
		bottomH = 56
	)
	height := top + bottomH
	for _, g := range groups {
		height += groupH + rowH*len(g.rows) + 8
	}
	x1 := labelW                // throughput panel's left edge
	x2 := labelW + panelW + gap // p99 panel's left edge
	scale := func(v, lo, hi float64) float64 {
		if v <= 0 {
			return 0
		}
		f := (math.Log10(v) - lo) / (hi - lo)
		return math.Max(0, math.Min(1, f)) * panelW
	}

	b := &strings.Builder{}
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="system-ui, -apple-system, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(b, `<text x="%d" y="24" font-size="16" font-weight="600">Rate-limit decisions: Sluice, Redis + Lua, in-process (token bucket)</text>`+"\n", 10)
	fmt.Fprintf(b, `<text x="%d" y="48" font-weight="600">decisions/s (log scale, longer is better)</text>`+"\n", x1)
	fmt.Fprintf(b, `<text x="%d" y="48" font-weight="600">p99 latency (log scale, shorter is better)</text>`+"\n", x2)

	plotTop, plotBottom := top, height-bottomH
	// Decade gridlines and their labels.
	for d := tLo; d <= tHi; d++ {
		x := float64(x1) + scale(math.Pow(10, d), tLo, tHi)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d0d7de"/>`+"\n", x, plotTop, x, plotBottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#57606a">%s</text>`+"\n", x, plotBottom+14, decade(d))
	}
	for d := pLo; d <= pHi; d++ {
		x := float64(x2) + scale(math.Pow(10, d), pLo, pHi)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d0d7de"/>`+"\n", x, plotTop, x, plotBottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#57606a">%s</text>`+"\n", x, plotBottom+14, dur(int64(math.Pow(10, d))))
	}
	y := plotTop
	for _, g := range groups {
		y += groupH
		fmt.Fprintf(b, `<text x="10" y="%d" font-weight="600">%s</text>`+"\n", y-8, html.EscapeString(g.title))
		for _, rw := range g.rows {
			color := familyColor[rw.c.Family]
			fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelW-8, y+rowH-5, html.EscapeString(rw.label))
			tw := scale(rw.c.OpsPerSec, tLo, tHi)
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x1, y+2, tw, rowH-4, color)
			fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#24292f">%s</text>`+"\n", float64(x1)+tw+4, y+rowH-5, rate(rw.c.OpsPerSec))
			pw := scale(float64(max(rw.c.P99, 1)), pLo, pHi)
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="0.75"/>`+"\n", x2, y+2, pw, rowH-4, color)
			fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#24292f">%s</text>`+"\n", float64(x2)+pw+4, y+rowH-5, dur(rw.c.P99))
			y += rowH
		}
		y += 8
	}
	m := r.Machine
	stamp := fmt.Sprintf("%s · %d cores · %s · %s", m.CPU, m.Cores, m.Kernel, m.Go)
	if v := redisVersion(m.Redis); v != "" {
		stamp += " · Redis " + v
	}
	fmt.Fprintf(b, `<text x="10" y="%d" fill="#57606a">%s · %s</text>`+"\n", height-12, html.EscapeString(stamp), html.EscapeString(m.Date))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// decade labels a power of ten on the throughput axis: 1, 10, ... 1k, 1M.
func decade(exp float64) string {
	e := int(exp)
	switch {
	case e >= 6:
		return fmt.Sprintf("%.0fM", math.Pow(10, float64(e-6)))
	case e >= 3:
		return fmt.Sprintf("%.0fk", math.Pow(10, float64(e-3)))
	}
	return fmt.Sprintf("%.0f", math.Pow(10, exp))
}
