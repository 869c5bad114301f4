package pgtx

import "time"

// The configuration rule of every setting of pgtx, written in the package
// doc: a zero value means the documented default, a negative value switches
// the setting off, and an optional feature is off while nil. The helpers
// below apply it.

// settings is a Config resolved to its effective values.
type settings struct {
	acquireTimeout  time.Duration // 0: no bound of its own
	commitTimeout   time.Duration // 0: no bound of its own
	rollbackTimeout time.Duration // 0: no bound of its own
	retry           RetryConfig
	tracer          TransactionTracer
	resolveCommits  bool
	resolveTimeout  time.Duration
	// statementTimeout is the session's statement_timeout pgtx sent (0:
	// none sent): a deadline carried to the server never raises it.
	statementTimeout time.Duration
}

// defaultOrNone maps 0 to def and a negative value to 0 (off).
func defaultOrNone[T int | int32 | float64 | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// durDefault maps 0 to def and keeps every other value.
func durDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}
