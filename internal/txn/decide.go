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

// plan decides how the transaction ends, given the connection's
// transaction status and, for a transaction begun in recovery, whether
// the server is still in recovery (a transaction that provably changes
// nothing keeps the caller's deadline).
func (x *idTracker) plan(begun bool, txStatus byte, stillInRecovery bool) sending {
	switch {
	case !begun:
		return sendNothing
	case txStatus == 'E':
		return sendRollback
	case x.kind == Captured && x.idAtCommit():
		return sendCommitReadingID
	case (x.kind == Captured && x.writeFree()) || (x.kind == InRecovery && stillInRecovery) || x.kind == Balanced:
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

// lost decides what the lost COMMIT answer leads to.
func (x *idTracker) lost() lostAnswer {
	switch {
	case x.kind == Plain:
		return lostUnknown
	case x.kind != Captured:
		return lostNotResolvable
	case !x.idRead:
		return lostAskBackend
	case x.idNull:
		return lostNotApplied
	}
	return lostResolve
}

// writeFree reports that the transaction provably has no id at COMMIT:
// every statement read it after itself, it was NULL, and no notification
// was sent.
func (x *idTracker) writeFree() bool {
	return x.idRead && x.idNull && !x.stale && !x.notify
}

// idAtCommit reports that COMMIT's write must read the id: the first write
// did not read it, or read none and statements since may have given it one,
// or the transaction may have sent a notification.
func (x *idTracker) idAtCommit() bool {
	return x.notify || !x.idRead || (x.idNull && x.stale)
}
