package txn

import "github.com/pgtx-go/pgtx/internal/resolve"

// Acknowledged returns the id of t's transaction, with the system and run
// of the server that gave it, for a transaction whose COMMIT succeeded:
// false when it had none (it wrote nothing) or it was not read (the pool
// does not resolve, or the server cannot be asked).
func (t *Tx) Acknowledged() (resolve.ID, bool) { return t.w.acknowledged() }

// acknowledged is [Tx.Acknowledged].
func (w *writer) acknowledged() (resolve.ID, bool) {
	id := w.track.current()
	return id, w.track.resolvedWith() == Captured && id.Xid != 0
}
