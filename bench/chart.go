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
	chartW      = 960
	chartH      = 490
	chartTop    = 90
	chartBottom = 380 // y of the x axis
	chartLeft   = 70
	chartGap    = 60 // between the two panels
)

// chartColors gives each contender its colour; the order is the legend's.
var chartColors = []struct{ name, color string }{
	{namePgtx, "#2b6cb0"},
	{nameBegin, "#a0aec0"},
	{nameNaive, "#dd6b20"},
	{nameJitter, "#38a169"},
	{nameCrdb, "#805ad5"},
}

// contentionChart draws commits/s per contender at each worker count, one
// panel per variant, with the READ COMMITTED ceiling as a dashed line over
// each group: a hand-written SVG, no plotting dependency.
func contentionChart(rows []contentionRow) []byte {
	var workers []int
	top := 0.0
	for _, r := range rows {
		if !slices.Contains(workers, r.Workers) {
			workers = append(workers, r.Workers)
		}
		top = math.Max(top, r.CommitsPerS)
	}
	slices.Sort(workers)
	step, ymax := niceScale(top * 1.08)
	y := func(v float64) float64 { return chartBottom - v/ymax*(chartBottom-chartTop) }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="18" font-weight="bold">SERIALIZABLE transfers on 10 hot accounts: commits/s (counted in the database)</text>`+"\n", chartLeft)
	fmt.Fprintf(&b, `<text x="%d" y="48" font-size="12" fill="#4a5568">higher is better; dashed line: READ COMMITTED + FOR UPDATE ceiling at the same worker count</text>`+"\n", chartLeft)

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
		barW := groupW * 0.8 / float64(len(chartColors))
		for g, w := range workers {
			gx := x0 + float64(g)*groupW + groupW*0.1
			for k, c := range chartColors {
				v, ok := rowValue(rows, variant, w, c.name)
				if !ok {
					continue
				}
				bx := gx + float64(k)*barW
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %d workers: %s commits/s</title></rect>`+"\n",
					bx+1, y(v), barW-2, chartBottom-y(v), c.color, html.EscapeString(c.name), w, num(v))
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="9" text-anchor="middle" fill="#2d3748">%s</text>`+"\n", bx+barW/2, y(v)-3, num(v))
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

	// legend
	lx := float64(chartLeft)
	for _, c := range chartColors {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="12" height="12" fill="%s"/>`+"\n", lx, chartBottom+42, c.color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12">%s</text>`+"\n", lx+17, chartBottom+52, html.EscapeString(c.name))
		lx += 36 + 6.7*float64(len(c.name))
	}
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#1a202c" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", lx, lx+24, chartBottom+48, chartBottom+48)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12">ceiling</text>`+"\n", lx+30, chartBottom+52)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" fill="#4a5568">pgtx/bench: go run . contention; closed loop; retrying contenders give up after 10 retries; see RESULTS.md</text>`+"\n", chartLeft, chartH-14)
	b.WriteString("</svg>\n")
	return b.Bytes()
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
