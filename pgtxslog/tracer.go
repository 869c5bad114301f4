package pgtxslog

import (
	"context"
	"errors"
	"log/slog"
	"math"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
)

// Messages of the lines a [Tracer] writes.
const (
	// MsgRetry is the message of a retry: an attempt failed and another
	// follows after a backoff.
	MsgRetry = "pgtx: retrying transaction"
	// MsgFailed is the message of a call that ended with an error.
	MsgFailed = "pgtx: transaction failed"
	// MsgCommitUnknown is the message of a call whose COMMIT may or may not
	// have happened (its error matches [pgtx.ErrCommitUnknown]).
	MsgCommitUnknown = "pgtx: commit outcome unknown"
	// MsgBudgetExhausted is the message of a retry the retry budget refused.
	MsgBudgetExhausted = "pgtx: retry budget exhausted"
	// MsgCancel is the message of a cancelled statement.
	MsgCancel = "pgtx: statement cancelled"
	// MsgSucceeded is the message of a call that committed, logged only
	// with [Options].LogSuccess.
	MsgSucceeded = "pgtx: transaction committed"
	// MsgAttempt is the message of the last attempt of a call, logged only
	// with [Options].LogAttempts.
	MsgAttempt = "pgtx: attempt finished"
	// MsgBreakerStateChange is the message of a circuit breaker's change of
	// state.
	MsgBreakerStateChange = "pgtx: circuit breaker state changed"
)

// Attribute keys of the lines a [Tracer] writes. They are stable: log queries
// and a handler's ReplaceAttr may rely on them.
const (
	// KeyLabel is the call's [pgtx.Options].Label; absent when empty.
	KeyLabel = "pgtx.label"
	// KeyIsolation is the call's isolation level, as [pgtx.Isolation.String].
	KeyIsolation = "pgtx.isolation"
	// KeyAttempt is the number of an attempt, from 1.
	KeyAttempt = "pgtx.attempt"
	// KeyAttempts is how many attempts a call made.
	KeyAttempts = "pgtx.attempts"
	// KeyClass is the error's class, as [pgtx.Class.String].
	KeyClass = "pgtx.class"
	// KeySQLState is the SQLSTATE of the error; absent when there is none.
	KeySQLState = "pgtx.sqlstate"
	// KeyBackoff is the pause before the next attempt.
	KeyBackoff = "pgtx.backoff"
	// KeyDuration is the wall time of an attempt (on a retry or attempt
	// line) or of a whole call (on the other call lines).
	KeyDuration = "pgtx.duration"
	// KeyErr is the error, as an error value.
	KeyErr = "pgtx.err"
	// KeyPID is the process id of the backend whose statement was
	// cancelled.
	KeyPID = "pgtx.pid"
	// KeyCancelOutcome is how a cancel ended: "signalled" (pg_cancel_backend
	// signalled the backend), "not_found" (the backend had already gone),
	// "protocol" (the protocol cancel request was delivered) or "closed"
	// (the connection was closed instead).
	KeyCancelOutcome = "pgtx.cancel.outcome"
	// KeyCancelMode is the pool's [pgtx.CancelMode], as
	// [pgtx.CancelMode.String]: "pool", "protocol" or "close".
	KeyCancelMode = "pgtx.cancel.mode"
	// KeyCancelFellBack reports whether the cancel pool failed and a
	// fallback was used.
	KeyCancelFellBack = "pgtx.cancel.fell_back"
	// KeyCancelLatency is the time from the context's end to the cancel's
	// answer.
	KeyCancelLatency = "pgtx.cancel.latency"
	// KeyBreakerName is the circuit breaker's [pgtx.BreakerConfig].Name;
	// absent when empty.
	KeyBreakerName = "pgtx.breaker.name"
	// KeyBreakerFrom and KeyBreakerTo are the states a breaker left and
	// entered, as [pgtx.BreakerState.String].
	KeyBreakerFrom = "pgtx.breaker.from"
	KeyBreakerTo   = "pgtx.breaker.to"
	// KeyBreakerReason says which rule opened the breaker, or why it
	// closed or went half-open.
	KeyBreakerReason = "pgtx.breaker.reason"
	// KeyBreakerCalls, KeyBreakerFailures and KeyBreakerSlow are the counts
	// of the breaker's window at the change.
	KeyBreakerCalls    = "pgtx.breaker.calls"
	KeyBreakerFailures = "pgtx.breaker.failures"
	KeyBreakerSlow     = "pgtx.breaker.slow"
)

// LevelOff is a level that turns a kind of line off: a [Tracer] never
// writes a line whose level is LevelOff, whatever the handler enables.
const LevelOff = slog.Level(math.MaxInt)

// Options sets what a [Tracer] logs and at which levels. Every level is a
// [slog.Leveler], so a [*slog.LevelVar] changes it while the program runs;
// a nil level means its default, given in brackets. [LevelOff] silences a
// kind of line.
type Options struct {
	// RetryConflict is the level of a retry after a serialization failure
	// or a deadlock ([pgtx.ClassConflict]), which is routine under
	// SERIALIZABLE [Debug].
	RetryConflict slog.Leveler
	// RetryOverload is the level of a retry after the server or a pooler
	// shed load ([pgtx.ClassOverload]) or could not be reached
	// ([pgtx.ClassUnavailable]) [Warn].
	RetryOverload slog.Leveler
	// RetryConnectionLost is the level of a retry after the connection was
	// lost before COMMIT was sent ([pgtx.ClassConnectionLost]) [Warn].
	RetryConnectionLost slog.Leveler

	// BudgetExhausted is the level of a retry the retry budget refused; the
	// call fails with an error matching [pgtx.ErrRetryBudgetExhausted]
	// [Warn].
	BudgetExhausted slog.Leveler
	// CommitUnknown is the level of a call whose error matches
	// [pgtx.ErrCommitUnknown]: the transaction may or may not have
	// committed [Error].
	CommitUnknown slog.Leveler

	// FailedRetryable is the level of a call that failed with a retryable
	// error (conflict, overload, lost connection) because its retries ran
	// out or its deadline left no room for another [Warn].
	FailedRetryable slog.Leveler
	// FailedTimeout is the level of a call that failed with a timeout:
	// 57014, 25P03, 25P04, the context's deadline or
	// [pgtx.ErrAcquireTimeout] [Warn].
	FailedTimeout slog.Leveler
	// FailedCanceled is the level of a call that ended because its caller
	// cancelled its context ([context.Canceled]) [Debug].
	FailedCanceled slog.Leveler
	// FailedServer is the level of a call that failed with a permanent
	// error saying the server is in trouble: SQLSTATE class 53 other than
	// 53300 (disk full, out of memory), class 58 (system error) and class
	// XX (internal error) [Error].
	FailedServer slog.Leveler
	// FailedPermanent is the level of a call that failed with any other
	// error: constraint violations, data and syntax errors, the caller's own
	// errors and errors wrapped by [pgtx.NonRetryable]. The caller gets the
	// error and decides what it means [Debug].
	FailedPermanent slog.Leveler

	// Cancel is the level of a statement cancelled as configured: signalled
	// over the cancel pool, found already gone, cancelled with the protocol
	// cancel request, or its connection closed in [pgtx.CancelModeClose]
	// [Debug].
	Cancel slog.Leveler
	// CancelFallback is the level of a cancel that fell back: the cancel
	// pool failed, or the connection was closed although CancelMode is not
	// [pgtx.CancelModeClose] (the cancel was not confirmed, or the
	// statement did not return within [pgtx.Config].CancelGrace) [Warn].
	CancelFallback slog.Leveler

	// BreakerOpened is the level of a circuit breaker's change to
	// [pgtx.BreakerOpen]: calls now fail at once with
	// [pgtx.ErrCircuitOpen] [Warn].
	BreakerOpened slog.Leveler
	// BreakerChanged is the level of a circuit breaker's other changes of
	// state: to [pgtx.BreakerHalfOpen] or [pgtx.BreakerClosed] [Info].
	BreakerChanged slog.Leveler

	// LogSuccess logs every call that committed, with its attempts and
	// duration, at level Succeeded.
	LogSuccess bool
	// Succeeded is the level of a committed call when LogSuccess is set
	// [Debug].
	Succeeded slog.Leveler

	// LogAttempts also logs the last attempt of every call, at level
	// Attempt, so that each attempt has a line: the others are logged as
	// retries anyway.
	LogAttempts bool
	// Attempt is the level of an attempt line when LogAttempts is set
	// [Debug].
	Attempt slog.Leveler
}

// Tracer logs pgtx events to a [*slog.Logger]. It implements every tracer
// interface of pgtx: [pgtx.TransactionTracer], [pgtx.CancelTracer] and
// [pgtx.BreakerTracer]; set as [pgtx.Config].Tracer it receives the events
// of the pool's calls, cancels and circuit breaker. Create it with [New];
// it is safe for concurrent use.
type Tracer struct {
	logger *slog.Logger // nil: slog.Default() at each event

	retryConflict, retryOverload, retryConnLost slog.Leveler
	budgetExhausted, commitUnknown              slog.Leveler
	failedRetryable, failedTimeout              slog.Leveler
	failedCanceled, failedServer                slog.Leveler
	failedPermanent                             slog.Leveler
	cancel, cancelFallback                      slog.Leveler
	breakerOpened, breakerChanged               slog.Leveler
	succeeded, attempt                          slog.Leveler
	logSuccess, logAttempts                     bool
}

var (
	_ pgtx.TransactionTracer = (*Tracer)(nil)
	_ pgtx.CancelTracer      = (*Tracer)(nil)
	_ pgtx.BreakerTracer     = (*Tracer)(nil)
)

// New returns a [Tracer] that writes to logger. A nil logger means
// [slog.Default] at the time of each event, so a later [slog.SetDefault]
// takes effect. A nil opts means the defaults of [Options].
func New(logger *slog.Logger, opts *Options) *Tracer {
	var o Options
	if opts != nil {
		o = *opts
	}
	return &Tracer{
		logger:          logger,
		retryConflict:   orLevel(o.RetryConflict, slog.LevelDebug),
		retryOverload:   orLevel(o.RetryOverload, slog.LevelWarn),
		retryConnLost:   orLevel(o.RetryConnectionLost, slog.LevelWarn),
		budgetExhausted: orLevel(o.BudgetExhausted, slog.LevelWarn),
		commitUnknown:   orLevel(o.CommitUnknown, slog.LevelError),
		failedRetryable: orLevel(o.FailedRetryable, slog.LevelWarn),
		failedTimeout:   orLevel(o.FailedTimeout, slog.LevelWarn),
		failedCanceled:  orLevel(o.FailedCanceled, slog.LevelDebug),
		failedServer:    orLevel(o.FailedServer, slog.LevelError),
		failedPermanent: orLevel(o.FailedPermanent, slog.LevelDebug),
		cancel:          orLevel(o.Cancel, slog.LevelDebug),
		cancelFallback:  orLevel(o.CancelFallback, slog.LevelWarn),
		breakerOpened:   orLevel(o.BreakerOpened, slog.LevelWarn),
		breakerChanged:  orLevel(o.BreakerChanged, slog.LevelInfo),
		succeeded:       orLevel(o.Succeeded, slog.LevelDebug),
		attempt:         orLevel(o.Attempt, slog.LevelDebug),
		logSuccess:      o.LogSuccess,
		logAttempts:     o.LogAttempts,
	}
}

func orLevel(l slog.Leveler, def slog.Level) slog.Leveler {
	if l == nil {
		return def
	}
	return l
}

// enabled returns the logger to write a line of level l to, or nil when
// the line is off or its level is disabled.
func (t *Tracer) enabled(ctx context.Context, l slog.Leveler) (*slog.Logger, slog.Level) {
	level := l.Level()
	if level == LevelOff {
		return nil, level
	}
	logger := t.logger
	if logger == nil {
		logger = slog.Default()
	}
	if !logger.Enabled(ctx, level) {
		return nil, level
	}
	return logger, level
}

// TraceTransactionStart returns ctx unchanged: a Tracer logs the ends of
// calls only.
func (t *Tracer) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}

// TraceAttemptStart returns ctx unchanged: a Tracer logs the ends of
// attempts only.
func (t *Tracer) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	return ctx
}

// TraceAttemptEnd logs a retry ([MsgRetry]) when another attempt follows, at
// the level of the error's class, and a retry the retry budget refused
// ([MsgBudgetExhausted]): an attempt after which no retry follows and whose
// error matches [pgtx.ErrRetryBudgetExhausted]. With [Options].LogAttempts
// it also logs the last attempt of a call ([MsgAttempt]); otherwise the
// call's end is logged by [Tracer.TraceTransactionEnd].
func (t *Tracer) TraceAttemptEnd(ctx context.Context, data pgtx.TraceAttemptEndData) {
	if !data.Retry {
		if data.Err != nil && errors.Is(data.Err, pgtx.ErrRetryBudgetExhausted) {
			t.budgetRefused(ctx, data)
		}
		if !t.logAttempts {
			return
		}
		logger, level := t.enabled(ctx, t.attempt)
		if logger == nil {
			return
		}
		attrs := make([]slog.Attr, 0, 8)
		attrs = appendCall(attrs, data.Label, data.Isolation)
		attrs = append(attrs, slog.Int(KeyAttempt, data.Attempt))
		if data.Err != nil {
			attrs = appendErr(attrs, data.Class, data.Err)
		}
		attrs = append(attrs, slog.Duration(KeyDuration, data.Duration))
		logger.LogAttrs(ctx, level, MsgAttempt, attrs...)
		return
	}
	var l slog.Leveler
	switch data.Class {
	case pgtx.ClassConflict:
		l = t.retryConflict
	case pgtx.ClassConnectionLost:
		l = t.retryConnLost
	default: // ClassOverload, ClassUnavailable, and any retryable class pgtx may add
		l = t.retryOverload
	}
	logger, level := t.enabled(ctx, l)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 9)
	attrs = appendCall(attrs, data.Label, data.Isolation)
	attrs = append(attrs, slog.Int(KeyAttempt, data.Attempt))
	attrs = appendErr(attrs, data.Class, data.Err)
	attrs = append(attrs,
		slog.Duration(KeyBackoff, data.Backoff),
		slog.Duration(KeyDuration, data.Duration))
	logger.LogAttrs(ctx, level, MsgRetry, attrs...)
}

// budgetRefused logs a retry the retry budget refused ([MsgBudgetExhausted]):
// the label, isolation level, attempt, the class of the attempt's error
// and the error.
func (t *Tracer) budgetRefused(ctx context.Context, data pgtx.TraceAttemptEndData) {
	logger, level := t.enabled(ctx, t.budgetExhausted)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 6)
	attrs = appendCall(attrs, data.Label, data.Isolation)
	attrs = append(attrs, slog.Int(KeyAttempt, data.Attempt))
	attrs = appendErr(attrs, data.Class, data.Err)
	logger.LogAttrs(ctx, level, MsgBudgetExhausted, attrs...)
}

// TraceTransactionEnd logs the end of a call: [MsgCommitUnknown] when its
// error matches [pgtx.ErrCommitUnknown], [MsgFailed] for any other error (at
// the level of its kind, see [Options]), and [MsgSucceeded] with
// [Options].LogSuccess. A call refused by the retry budget is not logged
// again: its refusal was ([MsgBudgetExhausted]).
func (t *Tracer) TraceTransactionEnd(ctx context.Context, data pgtx.TraceTransactionEndData) {
	if data.Err == nil {
		if !t.logSuccess {
			return
		}
		logger, level := t.enabled(ctx, t.succeeded)
		if logger == nil {
			return
		}
		attrs := make([]slog.Attr, 0, 4)
		attrs = appendCall(attrs, data.Label, data.Isolation)
		attrs = append(attrs,
			slog.Int(KeyAttempts, data.Attempts),
			slog.Duration(KeyDuration, data.Duration))
		logger.LogAttrs(ctx, level, MsgSucceeded, attrs...)
		return
	}
	if errors.Is(data.Err, pgtx.ErrRetryBudgetExhausted) {
		return
	}
	msg, l := MsgFailed, t.failedLevel(data.Class, data.Err)
	class := data.Class
	if errors.Is(data.Err, pgtx.ErrCommitUnknown) {
		msg, l, class = MsgCommitUnknown, t.commitUnknown, pgtx.ClassAmbiguous
	}
	logger, level := t.enabled(ctx, l)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = appendCall(attrs, data.Label, data.Isolation)
	attrs = append(attrs, slog.Int(KeyAttempts, data.Attempts))
	attrs = appendErr(attrs, class, data.Err)
	attrs = append(attrs, slog.Duration(KeyDuration, data.Duration))
	logger.LogAttrs(ctx, level, msg, attrs...)
}

// failedLevel returns the level of a call that failed with err of class c
// (err does not match pgtx.ErrCommitUnknown).
func (t *Tracer) failedLevel(c pgtx.Class, err error) slog.Leveler {
	switch {
	case c.Retryable():
		return t.failedRetryable
	case c == pgtx.ClassTimeout:
		if errors.Is(err, context.Canceled) {
			return t.failedCanceled
		}
		return t.failedTimeout
	case c == pgtx.ClassAmbiguous:
		return t.commitUnknown
	}
	if code := sqlState(err); len(code) == 5 && code != pgerrcode.TooManyConnections {
		switch code[:2] {
		case "53", "58", "XX":
			return t.failedServer
		}
	}
	return t.failedPermanent
}

// TraceCancel logs a cancelled statement ([MsgCancel]): at level Cancel
// when it was cancelled as configured, at level CancelFallback when the
// cancel pool failed (data.FellBack) or the connection was closed although
// the pool's mode is not [pgtx.CancelModeClose].
func (t *Tracer) TraceCancel(ctx context.Context, data pgtx.TraceCancelData) {
	l := t.cancel
	if data.FellBack || (data.Closed && data.Mode != pgtx.CancelModeClose) {
		l = t.cancelFallback
	}
	logger, level := t.enabled(ctx, l)
	if logger == nil {
		return
	}
	logger.LogAttrs(ctx, level, MsgCancel,
		slog.Uint64(KeyPID, uint64(data.PID)),
		slog.String(KeyCancelMode, data.Mode.String()),
		slog.String(KeyCancelOutcome, cancelOutcome(data)),
		slog.Bool(KeyCancelFellBack, data.FellBack),
		slog.Duration(KeyCancelLatency, data.Latency))
}

// cancelOutcome returns the value of KeyCancelOutcome for a cancel.
func cancelOutcome(data pgtx.TraceCancelData) string {
	switch {
	case data.Closed:
		return "closed"
	case data.NotFound:
		return "not_found"
	case data.FellBack || data.Mode == pgtx.CancelModeProtocol:
		return "protocol"
	case data.Mode == pgtx.CancelModePool:
		return "signalled"
	}
	return "unknown"
}

// TraceBreakerStateChange logs a circuit breaker's change of state
// ([MsgBreakerStateChange]): at level BreakerOpened when it opened, at
// level BreakerChanged otherwise (see [Options]).
func (t *Tracer) TraceBreakerStateChange(ctx context.Context, data pgtx.TraceBreakerStateChangeData) {
	l := t.breakerChanged
	if data.To == pgtx.BreakerOpen {
		l = t.breakerOpened
	}
	logger, level := t.enabled(ctx, l)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 7)
	if data.Name != "" {
		attrs = append(attrs, slog.String(KeyBreakerName, data.Name))
	}
	attrs = append(attrs,
		slog.String(KeyBreakerFrom, data.From.String()),
		slog.String(KeyBreakerTo, data.To.String()),
		slog.String(KeyBreakerReason, data.Reason),
		slog.Int64(KeyBreakerCalls, data.Calls),
		slog.Int64(KeyBreakerFailures, data.Failures),
		slog.Int64(KeyBreakerSlow, data.Slow))
	logger.LogAttrs(ctx, level, MsgBreakerStateChange, attrs...)
}

// appendCall appends the label (when not empty) and the isolation level.
func appendCall(attrs []slog.Attr, label string, iso pgtx.Isolation) []slog.Attr {
	if label != "" {
		attrs = append(attrs, slog.String(KeyLabel, label))
	}
	return append(attrs, slog.String(KeyIsolation, iso.String()))
}

// appendErr appends the class, the SQLSTATE (when there is one) and the
// error.
func appendErr(attrs []slog.Attr, c pgtx.Class, err error) []slog.Attr {
	attrs = append(attrs, slog.String(KeyClass, c.String()))
	if code := sqlState(err); code != "" {
		attrs = append(attrs, slog.String(KeySQLState, code))
	}
	return append(attrs, slog.Any(KeyErr, err))
}

// sqlState returns the SQLSTATE of the first *pgconn.PgError in err's tree
// (as errors.As finds it, As methods aside), or "". It walks the tree
// itself: errors.As allocates its target, even at a disabled level, and
// errors.AsType needs Go 1.26, above this module's go line.
func sqlState(err error) string {
	for err != nil {
		switch e := err.(type) {
		case *pgconn.PgError:
			return e.Code
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		case interface{ Unwrap() []error }:
			for _, err := range e.Unwrap() {
				if code := sqlState(err); code != "" {
					return code
				}
			}
			return ""
		default:
			return ""
		}
	}
	return ""
}
