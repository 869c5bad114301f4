package pgtxslog

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
)

// Event is a kind of line a [Tracer] writes. Each kind has a default level,
// given in the package documentation; [WithLevels] changes it.
type Event int

// The kinds of line of a [Tracer], with their messages.
const (
	// RetryConflict is a retry after a serialization failure or a deadlock
	// ([pgtx.ClassConflict]), routine under SERIALIZABLE: "retrying
	// transaction".
	RetryConflict Event = iota
	// RetryOverload is a retry after the server or a pooler shed load
	// ([pgtx.ClassOverload]) or could not be reached
	// ([pgtx.ClassUnavailable]): "retrying transaction".
	RetryOverload
	// RetryConnectionLost is a retry after the connection was lost before
	// COMMIT was sent ([pgtx.ClassConnectionLost]): "retrying transaction".
	RetryConnectionLost
	// BudgetExhausted is a retry the retry budget refused; the call fails
	// with an error matching [pgtx.ErrRetryBudgetExhausted]: "retry budget
	// exhausted". The call's end is not logged again.
	BudgetExhausted
	// CommitUnknown is a call whose error matches [pgtx.ErrCommitUnknown]:
	// the transaction may or may not have committed: "commit outcome
	// unknown".
	CommitUnknown
	// FailedRetryable is a call that failed with a retryable error
	// (conflict, overload, lost connection) because its retries ran out or
	// its deadline left no room for another: "transaction failed".
	FailedRetryable
	// FailedTimeout is a call that failed with a timeout: 57014, 25P03,
	// 25P04, the context's deadline or [pgtx.ErrAcquireTimeout]:
	// "transaction failed".
	FailedTimeout
	// FailedCanceled is a call that ended because its caller cancelled its
	// context ([context.Canceled]): "transaction failed".
	FailedCanceled
	// FailedServer is a call that failed with an error saying the server is
	// in trouble: SQLSTATE class 53 other than 53300 (disk full, out of
	// memory), class 58 (system error) and class XX (internal error):
	// "transaction failed".
	FailedServer
	// FailedPermanent is a call that failed with any other error:
	// constraint violations, data and syntax errors, the caller's own errors
	// and errors wrapped by [pgtx.NonRetryable]. The caller gets the error
	// and decides what it means: "transaction failed".
	FailedPermanent
	// Cancel is a statement cancelled as configured: signalled over the
	// cancel pool, found already gone, cancelled with the protocol cancel
	// request, or its connection closed in [pgtx.CancelModeClose]:
	// "statement cancelled".
	Cancel
	// CancelFallback is a cancel that fell back: the cancel pool failed, or
	// the connection was closed although the pool's mode is not
	// [pgtx.CancelModeClose] (the cancel was not confirmed, or the statement
	// did not return within [pgtx.Config].CancelGrace): "statement
	// cancelled".
	CancelFallback
	// BreakerOpened is a circuit breaker's change to [pgtx.BreakerOpen]:
	// calls now fail at once with [pgtx.ErrCircuitOpen]: "circuit breaker
	// state changed".
	BreakerOpened
	// BreakerChanged is a circuit breaker's other changes of state, to
	// [pgtx.BreakerHalfOpen] or [pgtx.BreakerClosed]: "circuit breaker
	// state changed".
	BreakerChanged
	// ContentionSwitched is the contention manager starting or stopping to
	// limit a label's attempts: "contention limit changed".
	ContentionSwitched
	// ContentionChanged is the contention manager changing the limit of a
	// label it keeps limiting, as it probes for the limit that commits
	// most: "contention limit changed".
	ContentionChanged
	// Committed is a call that committed: "transaction committed". It is
	// off by default.
	Committed
	// Attempt is the last attempt of a call, so that with the retries every
	// attempt has a line: "attempt finished". It is off by default.
	Attempt

	numEvents = iota
)

// LevelOff is a level that turns a kind of line off: a [Tracer] never
// writes a line whose level is LevelOff, whatever the handler enables.
const LevelOff = slog.Level(math.MaxInt)

// events holds the name, default level and message of every Event.
var events = [numEvents]struct {
	name  string
	level slog.Level
	msg   string
}{
	RetryConflict:       {"retry_conflict", slog.LevelDebug, "retrying transaction"},
	RetryOverload:       {"retry_overload", slog.LevelWarn, "retrying transaction"},
	RetryConnectionLost: {"retry_connection_lost", slog.LevelWarn, "retrying transaction"},
	BudgetExhausted:     {"budget_exhausted", slog.LevelWarn, "retry budget exhausted"},
	CommitUnknown:       {"commit_unknown", slog.LevelError, "commit outcome unknown"},
	FailedRetryable:     {"failed_retryable", slog.LevelWarn, "transaction failed"},
	FailedTimeout:       {"failed_timeout", slog.LevelWarn, "transaction failed"},
	FailedCanceled:      {"failed_canceled", slog.LevelDebug, "transaction failed"},
	FailedServer:        {"failed_server", slog.LevelError, "transaction failed"},
	FailedPermanent:     {"failed_permanent", slog.LevelDebug, "transaction failed"},
	Cancel:              {"cancel", slog.LevelDebug, "statement cancelled"},
	CancelFallback:      {"cancel_fallback", slog.LevelWarn, "statement cancelled"},
	BreakerOpened:       {"breaker_opened", slog.LevelWarn, "circuit breaker state changed"},
	BreakerChanged:      {"breaker_changed", slog.LevelInfo, "circuit breaker state changed"},
	ContentionSwitched:  {"contention_switched", slog.LevelInfo, "contention limit changed"},
	ContentionChanged:   {"contention_changed", slog.LevelDebug, "contention limit changed"},
	Committed:           {"committed", LevelOff, "transaction committed"},
	Attempt:             {"attempt", LevelOff, "attempt finished"},
}

// String returns the kind's name in snake case, such as "retry_conflict",
// or "Event(n)" for a value that is none of the kinds.
func (e Event) String() string {
	if e < 0 || e >= numEvents {
		return "Event(" + strconv.Itoa(int(e)) + ")"
	}
	return events[e].name
}

// Option configures a [Tracer] made by [NewTracer].
type Option func(*Tracer)

// WithLogger makes the Tracer write to logger. Without it, or with a nil
// logger, it writes to [slog.Default] at the time of each event, so a later
// [slog.SetDefault] takes effect.
func WithLogger(logger *slog.Logger) Option {
	return func(t *Tracer) { t.logger = logger }
}

// WithLevels sets the levels of the Tracer's lines: it maps a kind of line
// to its level. A kind that is missing, or whose level is nil, has its
// default level (see the package documentation); [LevelOff] silences it. A
// level is read at each event, so a [*slog.LevelVar] changes it while the
// program runs. The map is copied: changing it later has no effect; a key
// that is none of the kinds is ignored. Given more than once, each map is
// applied over the ones before it.
func WithLevels(levels map[Event]slog.Leveler) Option {
	return func(t *Tracer) {
		for e, l := range levels {
			if e >= 0 && e < numEvents {
				t.levels[e] = l
			}
		}
	}
}

// Tracer logs pgtx events to a [*slog.Logger]. It implements every tracer
// interface of pgtx: [pgtx.TransactionTracer], [pgtx.CancelTracer],
// [pgtx.BreakerTracer] and [pgtx.ContentionTracer]; set as
// [pgtx.Config].Tracer it receives the events of the pool's calls, cancels,
// circuit breaker and contention manager. Create it with [NewTracer]; the zero
// Tracer logs to [slog.Default] at the default levels. It is safe for
// concurrent use.
type Tracer struct {
	logger *slog.Logger            // nil: slog.Default() at each event
	levels [numEvents]slog.Leveler // nil: the kind's default level
}

var (
	_ pgtx.TransactionTracer = (*Tracer)(nil)
	_ pgtx.CancelTracer      = (*Tracer)(nil)
	_ pgtx.BreakerTracer     = (*Tracer)(nil)
	_ pgtx.ContentionTracer  = (*Tracer)(nil)
)

// NewTracer returns a [Tracer] configured by opts (nil options are
// skipped): by default it writes to [slog.Default] at the default levels.
func NewTracer(opts ...Option) *Tracer {
	t := &Tracer{}
	for _, opt := range opts {
		if opt != nil {
			opt(t)
		}
	}
	return t
}

// enabled returns the logger to write a line of kind e to and its level,
// or a nil logger when the kind is off or its level is disabled.
func (t *Tracer) enabled(ctx context.Context, e Event) (*slog.Logger, slog.Level) {
	var logger *slog.Logger
	level := events[e].level
	if t != nil {
		logger = t.logger
		if l := t.levels[e]; l != nil {
			level = l.Level()
		}
	}
	if level == LevelOff {
		return nil, level
	}
	if logger == nil {
		logger = slog.Default()
	}
	if !logger.Enabled(ctx, level) {
		return nil, level
	}
	return logger, level
}

// write writes a line of kind e: the error (if any) under the key "err",
// then attrs as the group "pgtx".
func write(ctx context.Context, logger *slog.Logger, level slog.Level, e Event, err error, attrs []slog.Attr) {
	group := slog.Attr{Key: "pgtx", Value: slog.GroupValue(attrs...)}
	if err == nil {
		logger.LogAttrs(ctx, level, events[e].msg, group)
		return
	}
	logger.LogAttrs(ctx, level, events[e].msg, slog.Any("err", err), group)
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

// TraceCancel logs a cancelled statement: as [Cancel] when it was
// cancelled as configured, as [CancelFallback] when the cancel pool failed
// (data.FellBack) or the connection was closed although the pool's mode is
// not [pgtx.CancelModeClose].
func (t *Tracer) TraceCancel(ctx context.Context, data pgtx.TraceCancelData) {
	e := Cancel
	if data.FellBack || (data.Closed && data.Mode != pgtx.CancelModeClose) {
		e = CancelFallback
	}
	logger, level := t.enabled(ctx, e)
	if logger == nil {
		return
	}
	write(ctx, logger, level, e, nil, []slog.Attr{
		slog.Uint64("pid", uint64(data.PID)),
		slog.String("cancel_mode", data.Mode.String()),
		slog.String("cancel_outcome", cancelOutcome(data)),
		slog.Bool("fell_back", data.FellBack),
		slog.Duration("latency", data.Latency),
	})
}

// cancelOutcome returns how a cancel ended: "signalled", "not_found",
// "protocol" or "closed".
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

// TraceBreakerStateChange logs a circuit breaker's change of state: as
// [BreakerOpened] when it opened, as [BreakerChanged] otherwise.
func (t *Tracer) TraceBreakerStateChange(ctx context.Context, data pgtx.TraceBreakerStateChangeData) {
	e := BreakerChanged
	if data.To == pgtx.BreakerOpen {
		e = BreakerOpened
	}
	logger, level := t.enabled(ctx, e)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 7)
	if data.Name != "" {
		attrs = append(attrs, slog.String("breaker", data.Name))
	}
	attrs = append(attrs,
		slog.String("from", data.From.String()),
		slog.String("to", data.To.String()),
		slog.String("reason", data.Reason),
		slog.Int64("calls", data.Calls),
		slog.Int64("failures", data.Failures),
		slog.Int64("slow", data.Slow))
	write(ctx, logger, level, e, nil, attrs)
}

// TraceContention logs a change of a label's limit by the contention
// manager: as [ContentionSwitched] when it starts or stops limiting the
// label, as [ContentionChanged] when it changes the limit of a label it
// keeps limiting.
func (t *Tracer) TraceContention(ctx context.Context, data pgtx.TraceContentionData) {
	e := ContentionChanged
	if !data.Limiting || data.Previous == 0 {
		e = ContentionSwitched
	}
	logger, level := t.enabled(ctx, e)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 5)
	if data.Label != "" {
		attrs = append(attrs, slog.String("label", data.Label))
	}
	attrs = append(attrs,
		slog.Bool("limiting", data.Limiting),
		slog.Int("limit", data.Limit),
		slog.Int("previous", data.Previous),
		slog.Float64("conflict_ratio", data.ConflictRatio))
	write(ctx, logger, level, e, nil, attrs)
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
