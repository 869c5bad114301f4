package txn

// What COMMIT's write sends, and what a lost answer leads to, decided from
// what the transaction's statements read of its id.

// sending is how a transaction is ended.
type sending int

const (
	sendNothing               sending = iota // BEGIN was never sent: nothing to commit
	sendRollback                             // a statement failed inside fn: ROLLBACK, and pgx.ErrTxCommitRollback
	sendCommit                               // a bare COMMIT, which the caller's cancellation cannot interrupt
	sendCommitKeepingDeadline                // a bare COMMIT on the caller's context: it changes nothing
	sendCommitReadingID                      // [select id, Flush, COMMIT, Sync], uncancellable
)

// plan decides how t's transaction ends, given the connection's
// transaction status and, for a transaction begun in recovery, whether
// the server is still in recovery (a transaction that provably changes
// nothing keeps the caller's deadline).
func (t *Tx) plan(txStatus byte, stillInRecovery bool) sending {
	switch {
	case !t.begun:
		return sendNothing
	case txStatus == 'E':
		return sendRollback
	case t.kind == Captured && t.idAtCommit():
		return sendCommitReadingID
	case (t.kind == Captured && t.writeFree()) || (t.kind == InRecovery && stillInRecovery):
		return sendCommitKeepingDeadline
	}
	return sendCommit
}

// lostAnswer is what a COMMIT whose answer was lost leads to.
type lostAnswer int

const (
	lostUnknown       lostAnswer = iota // the pool does not resolve: ErrCommitUnknown
	lostNotResolvable                   // the transaction cannot be asked about (notResolvable)
	lostAskBackend                      // its id never arrived: ask its backend, which may still run it
	lostNotApplied                      // it had no id at COMMIT: it changed nothing, run it again
	lostResolve                         // its id is known: ask the server what became of it
)

// lost decides what t's lost COMMIT answer leads to.
func (t *Tx) lost() lostAnswer {
	switch {
	case t.kind == Plain:
		return lostUnknown
	case t.kind != Captured:
		return lostNotResolvable
	case !t.idRead:
		return lostAskBackend
	case t.idNull:
		return lostNotApplied
	}
	return lostResolve
}

// writeFree reports that the transaction provably has no id at COMMIT:
// every statement read it after itself, it was NULL, and no notification
// was sent.
func (t *Tx) writeFree() bool {
	return t.idRead && t.idNull && !t.stale && !t.notify
}

// idAtCommit reports that COMMIT's write must read the id: the first write
// did not read it, or read none and statements since may have given it one,
// or the transaction may have sent a notification.
func (t *Tx) idAtCommit() bool {
	return t.notify || !t.idRead || (t.idNull && t.stale)
}
