package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// probeEvery is how often a writeProbe connects.
const probeEvery = 50 * time.Millisecond

// probeResult is one probe: when it ended, and whether a connection that
// takes writes was made.
type probeResult struct {
	at time.Time
	ok bool
}

// writeProbe connects to a server every probeEvery, each time anew, to
// tell when the server takes connections (and, with a URI that asks for
// it, writes): the outage as the server shows it, beside which a test sets
// how soon its calls came back.
type writeProbe struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	results []probeResult // written by the probe's goroutine, read after Stop
}

// startWriteProbe starts probing uri until Stop, or the test's end.
func startWriteProbe(t *testing.T, uri string) *writeProbe {
	t.Helper()
	p := &writeProbe{stop: make(chan struct{})}
	p.wg.Go(func() {
		tick := time.NewTicker(probeEvery)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c, err := pgx.Connect(ctx, uri)
			if err == nil {
				_ = c.Close(ctx)
			}
			cancel()
			p.results = append(p.results, probeResult{at: time.Now(), ok: err == nil})
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	})
	t.Cleanup(func() { p.Stop() })
	return p
}

// Stop stops the probe and returns its results, in order.
func (p *writeProbe) Stop() []probeResult {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
	return p.results
}

// serverBack returns when the server came back for good within (from,
// to): the first of the successful probes that ended last before to, with
// a failed one ended after from before them; false when no probe failed
// within (from, to) or none succeeded after the last failure.
func serverBack(results []probeResult, from, to time.Time) (time.Time, bool) {
	var back time.Time
	failed := false
	for _, r := range results {
		if !r.at.After(from) || !r.at.Before(to) {
			continue
		}
		switch {
		case !r.ok:
			failed, back = true, time.Time{}
		case failed && back.IsZero():
			back = r.at
		}
	}
	return back, failed && !back.IsZero()
}
