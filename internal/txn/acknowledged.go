package txn

import "github.com/pgtx-go/pgtx/internal/resolve"

// Acknowledged returns the id of t's transaction, with the system and run
// of the server that gave it, for a transaction whose COMMIT succeeded:
// false when it had none (it wrote nothing) or it was not read (the pool
// does not resolve, or the server cannot be asked).
func (t *Tx) Acknowledged() (resolve.ID, bool) {
	x := &t.w.track
	return x.id, x.kind == Captured && x.id.Xid != 0
}
