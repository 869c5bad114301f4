//go:build race

package integration

// raceEnabled reports a test binary built with the race detector, which
// slows every goroutine down several times over: throughput ratios measured
// against a baseline get a wider margin there.
const raceEnabled = true
