//go:build !race

package integration

// raceEnabled reports a test binary built with the race detector.
const raceEnabled = false
