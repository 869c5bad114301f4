package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// spread is a figure measured in several repetitions: the median of the
// repetitions, their range, and a 95% bootstrap interval of the median.
type spread struct {
	Min    float64   `json:"min"`
	Median float64   `json:"median"`
	Max    float64   `json:"max"`
	CILow  float64   `json:"ci95_low"`
	CIHigh float64   `json:"ci95_high"`
	Reps   []float64 `json:"reps"`
}

// bootstrapSamples is how many resamplings the bootstrap interval takes.
const bootstrapSamples = 2000

func newSpread(reps []float64) spread {
	s := slices.Clone(reps)
	slices.Sort(s)
	// Percentile bootstrap of the median: resample the repetitions with
	// replacement, with a fixed seed so that a report can be recomputed.
	rng := rand.New(rand.NewPCG(1, uint64(len(s))))
	meds := make([]float64, bootstrapSamples)
	re := make([]float64, len(s))
	for b := range meds {
		for i := range re {
			re[i] = s[rng.IntN(len(s))]
		}
		slices.Sort(re)
		meds[b] = medianOf(re)
	}
	slices.Sort(meds)
	return spread{
		Min: s[0], Median: medianOf(s), Max: s[len(s)-1],
		CILow: meds[bootstrapSamples*25/1000], CIHigh: meds[bootstrapSamples*975/1000-1],
		Reps: reps,
	}
}

// formatCI renders s as "median (ci low–high)" with prec decimals and suffix.
func (s spread) formatCI(prec int, suffix string) string {
	return fmt.Sprintf("%s%s (%s–%s)", fmtf(s.Median, prec), suffix, fmtf(s.CILow, prec), fmtf(s.CIHigh, prec))
}

// format renders s as "median [min–max]" with prec decimals and suffix.
func (s spread) format(prec int, suffix string) string {
	return fmt.Sprintf("%s%s [%s–%s]", fmtf(s.Median, prec), suffix, fmtf(s.Min, prec), fmtf(s.Max, prec))
}

// medianOf returns the median of sorted values.
func medianOf(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
