package cancel

import (
	"testing"
	"time"
)

// TestTargetNeeded: in ModePool a connection without a target (behind a
// pooler whose pids are not its backends', or a server that could not
// tell) is cancelled with the protocol cancel request, the cancel pool not
// asked; with one, the cancel pool is asked about that backend.
func TestTargetNeeded(t *testing.T) {
	for _, tt := range []struct {
		name    string
		target  Target
		queries int32
		want    Outcome
	}{
		{"no target", Target{}, 0, Protocol},
		{"a target", Target{PID: 4242, Start: 7}, 1, Signalled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hs := newHarness(t, Settings{Mode: ModePool, Grace: time.Second}, live, poolAnswer{visible: true, ours: true, signalled: true}, acked)
			hs.h.SetTarget(tt.target)
			hs.h.SetReady()
			if got := hs.cancel(t, 0); got.Outcome != tt.want {
				t.Errorf("outcome %v, want %v", got.Outcome, tt.want)
			}
			if n := hs.pool.queries.Load(); n != tt.queries {
				t.Errorf("%d cancel pool queries, want %d", n, tt.queries)
			}
		})
	}
}
