package cancel

import (
	"context"
	"testing"
	"time"
)

// TestResignalUntilReturned: a statement still running after its backend
// was signalled (the signal arrived while the backend read its next
// message, and was ignored) is signalled again until it returns; the
// cancellation counts once, as signalled, and the connection is kept.
func TestResignalUntilReturned(t *testing.T) {
	hs := newHarness(t, Settings{Mode: ModePool, Grace: time.Hour, Resignal: time.Millisecond}, live,
		poolAnswer{visible: true, ours: true, signalled: true}, 0)
	hs.pool.queried = make(chan struct{})
	hs.h.SetTarget(Target{PID: 4242, Start: 1_700_000_000_000_000})
	hs.h.SetReady()
	ctx, stop := context.WithCancel(context.Background())
	stop()
	hs.h.HandleCancel(ctx)
	for i := range 3 { // the signal, and two more while the statement runs
		select {
		case <-hs.pool.queried:
		case <-time.After(10 * time.Second): // a bound on a hang, not a measure
			t.Fatalf("%d signals while the statement ran for 10s, want it signalled again", i)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range hs.pool.queried { // one may be on its way
		}
	}()
	hs.h.HandleUnwatchAfterCancel()
	close(hs.pool.queried)
	<-done
	if r := hs.results[0]; r.Outcome != Signalled {
		t.Errorf("reported %+v, want signalled", r)
	}
	if n := hs.c.Counts(); n.Sent != 1 || n.Signalled != 1 || n.Closed != 0 {
		t.Errorf("counts %+v, want one cancellation, signalled", n)
	}
	if hs.conn.closed.Load() || hs.h.Doomed() {
		t.Error("the connection was not kept")
	}
}
