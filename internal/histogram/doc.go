// Package histogram counts durations into the fixed buckets of every
// pgtx.Histogram, lock-free, so that a hot path records a wait with a few
// atomic additions.
package histogram
