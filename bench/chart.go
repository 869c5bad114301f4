package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"math"
	"os"
	"slices"
)

// Chart geometry, in SVG user units.
const (
	chartW      = 1280
	chartH      = 520
	chartTop    = 90
	chartBottom = 380 // y of the x axis
	chartLeft   = 70
	chartGap    = 60 // between the two panels
)

// chartColors gives each contender its colour; the order is the legend's
// and the bars'. Contenders not listed are not drawn.
var chartColors = []struct{ name, color string }{
	{namePgtx, "#2b6cb0"},
	{namePgtxNoManager, "#90cdf4"},
	{nameBegin, "#a0aec0"},
	{nameNaive, "#dd6b20"},
	{nameJitter, "#38a169"},
	{nameCrdb, "#805ad5"},
	{namePgbench, "#d53f8c"},
}

// contentionChart draws commits/s per contender at each worker count of the
// hot cells, one panel per variant, with the READ COMMITTED ceiling as a
// dashed line over each group: a hand-written SVG, no plotting dependency.
// Each group draws only the contenders that ran at its worker count.
func contentionChart(rows []contentionRow) []byte {
	var hot []contentionRow
	for _, r := range rows {
		// Results written before the accounts field have 0: all hot.
		if r.Accounts == hotAccounts || r.Accounts == 0 {
			hot = append(hot, r)
		}
	}
	rows = hot
	var workers []int
	top := 0.0
	for _, r := range rows {
		if !slices.Contains(workers, r.Workers) {
			workers = append(workers, r.Workers)
		}
		top = math.Max(top, r.CommitsPerS)
	}
	slices.Sort(workers)
	// The most bars any group has sets the bars' width.
	most := 1
	for _, variant := range []string{variantOrdered, variantRandom} {
		for _, w := range workers {
			most = max(most, len(groupBars(rows, variant, w)))
		}
	}
	step, ymax := niceScale(top * 1.15)
	y := func(v float64) float64 { return chartBottom - v/ymax*(chartBottom-chartTop) }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="18" font-weight="bold">SERIALIZABLE transfers on %d hot accounts: commits/s (counted in the database; pgbench: its tps)</text>`+"\n", chartLeft, hotAccounts)
	fmt.Fprintf(&b, `<text x="%d" y="48" font-size="12" fill="#4a5568">higher is better; dashed line: READ COMMITTED + FOR UPDATE ceiling at the same worker count; pgbench ran after the interleaved Go slices</text>`+"\n", chartLeft)

	panelW := float64(chartW-chartLeft-20-chartGap) / 2
	for p, variant := range []string{variantOrdered, variantRandom} {
		x0 := float64(chartLeft) + float64(p)*(panelW+chartGap)
		// y grid and labels
		for v := 0.0; v <= ymax+step/2; v += step {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e2e8f0"/>`+"\n", x0, x0+panelW, y(v), y(v))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end" fill="#4a5568">%s</text>`+"\n", x0-6, y(v)+4, num(v))
		}
		title := "rows updated in id order (40001)"
		if variant == variantRandom {
			title = "rows updated in random order (40001, 40P01)"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="13" font-weight="bold" text-anchor="middle">%s</text>`+"\n", x0+panelW/2, chartTop-16, html.EscapeString(title))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#2d3748"/>`+"\n", x0, x0+panelW, chartBottom, chartBottom)

		groupW := panelW / float64(max(1, len(workers)))
		barW := groupW * 0.8 / float64(most)
		for g, w := range workers {
			gx := x0 + float64(g)*groupW + groupW*0.1 // the group's left edge
			bars := groupBars(rows, variant, w)
			bx0 := gx + (groupW*0.8-barW*float64(len(bars)))/2 // centred
			for k, c := range bars {
				bx := bx0 + float64(k)*barW
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %d workers: %s commits/s</title></rect>`+"\n",
					bx+1, y(c.v), barW-2, chartBottom-y(c.v), c.color, html.EscapeString(c.name), w, num(c.v))
				// The value, upright over the bar, or along it when the bar
				// is too narrow for it.
				if barW >= 30 {
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="9" text-anchor="middle" fill="#2d3748">%s</text>`+"\n", bx+barW/2, y(c.v)-3, num(c.v))
				} else {
					tx, ty := bx+barW/2+3, y(c.v)-3
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="9" transform="rotate(-90 %.1f %.1f)" fill="#2d3748">%s</text>`+"\n", tx, ty, tx, ty, num(c.v))
				}
			}
			if v, ok := rowValue(rows, variantCeiling, w, nameCeiling); ok {
				fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#1a202c" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n",
					gx-groupW*0.05, gx+groupW*0.85, y(v), y(v))
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="end" fill="#1a202c">ceiling %s</text>`+"\n", gx+groupW*0.85, y(v)-4, num(v))
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12" text-anchor="middle">%d workers</text>`+"\n", gx+groupW*0.4, chartBottom+18, w)
		}
	}
	fmt.Fprintf(&b, `<text x="16" y="%.1f" font-size="12" transform="rotate(-90 16 %.1f)" text-anchor="middle">commits/s</text>`+"\n",
		float64(chartTop+chartBottom)/2, float64(chartTop+chartBottom)/2)

	// legend, wrapped onto a second line when it does not fit on one
	lx, ly := float64(chartLeft), chartBottom+42
	entry := func(width float64) {
		if lx+width > chartW-20 {
			lx, ly = float64(chartLeft), ly+22
		}
	}
	for _, c := range chartColors {
		w := 36 + 6.7*float64(len(c.name))
		entry(w)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="12" height="12" fill="%s"/>`+"\n", lx, ly, c.color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12">%s</text>`+"\n", lx+17, ly+10, html.EscapeString(c.name))
		lx += w
	}
	entry(80)
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#1a202c" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", lx, lx+24, ly+6, ly+6)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12">ceiling</text>`+"\n", lx+30, ly+10)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" fill="#4a5568">pgtx/bench: go run . contention; closed loop; retrying contenders give up after %d retries, pgbench too (%s, no backoff); see RESULTS.md</text>`+"\n",
		chartLeft, chartH-14, loopMaxRetries, html.EscapeString(namePgbench))
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// chartBar is one bar of a group.
type chartBar struct {
	name, color string
	v           float64
}

// groupBars are the bars of one variant at one worker count: the charted
// contenders that have a row there, in the legend's order.
func groupBars(rows []contentionRow, variant string, workers int) []chartBar {
	var bars []chartBar
	for _, c := range chartColors {
		if v, ok := rowValue(rows, variant, workers, c.name); ok {
			bars = append(bars, chartBar{c.name, c.color, v})
		}
	}
	return bars
}

// replot redraws the contention chart from a results file written by -json.
func replot(jsonPath, svgPath string) error {
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	var f struct {
		Scenarios []struct {
			Name string          `json:"name"`
			Data json.RawMessage `json:"data"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("%s: %w", jsonPath, err)
	}
	for _, s := range f.Scenarios {
		if s.Name != "contention" {
			continue
		}
		var rows []contentionRow
		if err := json.Unmarshal(s.Data, &rows); err != nil {
			return fmt.Errorf("%s: contention: %w", jsonPath, err)
		}
		return os.WriteFile(svgPath, contentionChart(rows), 0o644)
	}
	return fmt.Errorf("%s has no contention results", jsonPath)
}

// rowValue finds the commits/s of one contender on one variant at one worker
// count.
func rowValue(rows []contentionRow, variant string, workers int, name string) (float64, bool) {
	for _, r := range rows {
		if r.Variant == variant && r.Workers == workers && r.Contender == name {
			return r.CommitsPerS, true
		}
	}
	return 0, false
}

// niceScale returns a round tick step and the axis maximum (a multiple of
// it) for values up to top, with about five ticks.
func niceScale(top float64) (step, ymax float64) {
	if top <= 0 {
		return 1, 5
	}
	raw := top / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	return step, math.Ceil(top/step) * step
}
