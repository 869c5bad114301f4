package pgtxslog

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
)

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

// TraceAttemptEnd logs a retry when another attempt follows, as
// [RetryConflict], [RetryOverload] or [RetryConnectionLost] by the error's
// class, and a retry the retry budget refused ([BudgetExhausted]): an
// attempt after which no retry follows and whose error matches
// [pgtx.ErrRetryBudgetExhausted]. It also logs the last attempt of a call
// as [Attempt], which is off by default; the call's end is logged by
// [Tracer.TraceTransactionEnd].
func (t *Tracer) TraceAttemptEnd(ctx context.Context, data pgtx.TraceAttemptEndData) {
	if data.Retry {
		t.retry(ctx, data)
		return
	}
	if data.Err != nil && errors.Is(data.Err, pgtx.ErrRetryBudgetExhausted) {
		t.budgetRefused(ctx, data)
	}
	logger, level := t.enabled(ctx, Attempt)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = appendCall(attrs, data.Label, data.Isolation)
	attrs = append(attrs, slog.Int("attempt", data.Attempt))
	if data.Err != nil {
		attrs = appendClass(attrs, data.Class, data.Err)
	}
	attrs = append(attrs, slog.Duration("duration", data.Duration))
	attrs = appendAdmission(attrs, data)
	write(ctx, logger, level, Attempt, data.Err, attrs)
}

// retry logs an attempt another one follows.
func (t *Tracer) retry(ctx context.Context, data pgtx.TraceAttemptEndData) {
	e := RetryOverload // ClassOverload, ClassUnavailable, and any retryable class pgtx may add
	switch data.Class {
	case pgtx.ClassConflict:
		e = RetryConflict
	case pgtx.ClassConnectionLost:
		e = RetryConnectionLost
	}
	logger, level := t.enabled(ctx, e)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 10)
	attrs = appendCall(attrs, data.Label, data.Isolation)
	attrs = append(attrs, slog.Int("attempt", data.Attempt))
	attrs = appendClass(attrs, data.Class, data.Err)
	attrs = append(attrs,
		slog.Duration("backoff", data.Backoff),
		slog.Duration("duration", data.Duration))
	attrs = appendAdmission(attrs, data)
	write(ctx, logger, level, e, data.Err, attrs)
}

// budgetRefused logs a retry the retry budget refused: the label,
// isolation level, attempt, the class of the attempt's error and the
// error.
func (t *Tracer) budgetRefused(ctx context.Context, data pgtx.TraceAttemptEndData) {
	logger, level := t.enabled(ctx, BudgetExhausted)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 5)
	attrs = appendCall(attrs, data.Label, data.Isolation)
	attrs = append(attrs, slog.Int("attempt", data.Attempt))
	attrs = appendClass(attrs, data.Class, data.Err)
	write(ctx, logger, level, BudgetExhausted, data.Err, attrs)
}

// TraceTransactionEnd logs the end of a call: [CommitUnknown] when its
// error matches [pgtx.ErrCommitUnknown], one of the Failed kinds for any
// other error, and [Committed], off by default, when it committed. A call
// refused by the retry budget is not logged again: its refusal was
// ([BudgetExhausted]).
func (t *Tracer) TraceTransactionEnd(ctx context.Context, data pgtx.TraceTransactionEndData) {
	if data.Err != nil && errors.Is(data.Err, pgtx.ErrRetryBudgetExhausted) {
		return
	}
	e, class := Committed, data.Class
	switch {
	case data.Err == nil:
	case errors.Is(data.Err, pgtx.ErrCommitUnknown):
		e, class = CommitUnknown, pgtx.ClassAmbiguous
	default:
		e = failed(data.Class, data.Err)
	}
	logger, level := t.enabled(ctx, e)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 6)
	attrs = appendCall(attrs, data.Label, data.Isolation)
	attrs = append(attrs, slog.Int("attempts", data.Attempts))
	if data.Err != nil {
		attrs = appendClass(attrs, class, data.Err)
	}
	attrs = append(attrs, slog.Duration("duration", data.Duration))
	write(ctx, logger, level, e, data.Err, attrs)
}

// failed returns the kind of line of a call that failed with err of class
// c (err does not match pgtx.ErrCommitUnknown).
func failed(c pgtx.Class, err error) Event {
	switch {
	case c.Retryable():
		return FailedRetryable
	case c == pgtx.ClassTimeout:
		if errors.Is(err, context.Canceled) {
			return FailedCanceled
		}
		return FailedTimeout
	case c == pgtx.ClassAmbiguous:
		return CommitUnknown
	}
	if code := sqlState(err); len(code) == 5 && code != pgerrcode.TooManyConnections {
		switch code[:2] {
		case "53", "58", "XX":
			return FailedServer
		}
	}
	return FailedPermanent
}

// appendCall appends the label (when not empty) and the isolation level.
func appendCall(attrs []slog.Attr, label string, iso pgtx.Isolation) []slog.Attr {
	if label != "" {
		attrs = append(attrs, slog.String("label", label))
	}
	return append(attrs, slog.String("isolation", iso.String()))
}

// appendClass appends the error's class and its SQLSTATE, when it has
// one.
func appendClass(attrs []slog.Attr, c pgtx.Class, err error) []slog.Attr {
	attrs = append(attrs, slog.String("class", c.String()))
	if code := sqlState(err); code != "" {
		attrs = append(attrs, slog.String("sqlstate", code))
	}
	return attrs
}

// appendAdmission appends the wait at the contention manager's gate and
// the limit the attempt was admitted under, when the gate limited it.
func appendAdmission(attrs []slog.Attr, data pgtx.TraceAttemptEndData) []slog.Attr {
	if data.Limit == 0 {
		return attrs
	}
	return append(attrs,
		slog.Duration("admission_wait", data.AdmissionWait),
		slog.Int("limit", data.Limit))
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
