package txn

import (
	"testing"

	"github.com/pgtx-go/pgtx/internal/resolve"
)

// TestAcknowledged: a committed transaction names its id only when the
// pool read it (a captured transaction that wrote), with the run that gave
// it.
func TestAcknowledged(t *testing.T) {
	run := resolve.Run{Timeline: 3, Start: 10, Epoch: 20}
	tests := []struct {
		name string
		tx   *Tx
		want bool
	}{
		{"captured, wrote", &Tx{w: writer{track: idTracker{kind: Captured, id: resolve.ID{Xid: 730, System: 9, Run: run}}}}, true},
		{"captured, wrote nothing", &Tx{w: writer{track: idTracker{kind: Captured, id: resolve.ID{System: 9, Run: run}}}}, false},
		{"the pool does not resolve", &Tx{w: writer{track: idTracker{kind: Plain}}}, false},
		{"a server that cannot be asked", &Tx{w: writer{track: idTracker{kind: Uncaptured}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, ok := tt.tx.Acknowledged()
			if ok != tt.want || (ok && id != tt.tx.w.track.id) {
				t.Errorf("Acknowledged = %+v, %v; want %v", id, ok, tt.want)
			}
		})
	}
}
