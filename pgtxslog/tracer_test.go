package pgtxslog_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxslog"
)

// recorder is a slog.Handler that stores the records it is given. Records
// from loggers derived with WithAttrs or WithGroup are not expected.
type recorder struct {
	min slog.Level

	mu      sync.Mutex
	records []slog.Record
	ctxs    []context.Context
}

func (h *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }

func (h *recorder) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	h.ctxs = append(h.ctxs, ctx)
	return nil
}

func (h *recorder) WithAttrs([]slog.Attr) slog.Handler { panic("recorder: WithAttrs") }
func (h *recorder) WithGroup(string) slog.Handler      { panic("recorder: WithGroup") }

// newRecorder returns a handler enabled from min and a Tracer writing to it.
func newRecorder(min slog.Level, opts pgtxslog.Option) (*recorder, *pgtxslog.Tracer) {
	h := &recorder{min: min}
	return h, pgtxslog.NewTracer(pgtxslog.WithLogger(slog.New(h)), opts)
}

// logCase is one case of a table test of one trace method: the tracer's
// options, the data the method is given and the lines it must log.
type logCase[D any] struct {
	name string
	opts pgtxslog.Option
	data D
	want []line
}

// runLogCases runs each case as a parallel subtest: trace hands the case's
// data to a tracer with the case's options, recording every level, which
// must log the case's lines.
func runLogCases[D any](t *testing.T, tests []logCase[D], trace func(*pgtxslog.Tracer, context.Context, D)) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, tr := newRecorder(slog.LevelDebug, tt.opts)
			trace(tr, context.Background(), tt.data)
			assertLines(t, h, tt.want...)
		})
	}
}

// levels is the type of WithLevels's map.
type levels = map[pgtxslog.Event]slog.Leveler

// line is what a test expects of a record: its level, message and
// attributes, rendered with slog.Value.String. The key "err" is the
// record's top-level error; every other key is one of the "pgtx" group's.
type line struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// lines returns the records as lines. A record must hold at most a
// top-level "err" and then exactly one attribute: the group "pgtx".
func (h *recorder) lines(t *testing.T) []line {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]line, 0, len(h.records))
	for _, r := range h.records {
		l := line{level: r.Level, msg: r.Message, attrs: map[string]string{}}
		var top []string
		r.Attrs(func(a slog.Attr) bool {
			top = append(top, a.Key)
			switch {
			case a.Key == "err":
				if _, ok := a.Value.Any().(error); !ok {
					t.Errorf("%q: err is a %v, not an error", r.Message, a.Value.Kind())
				}
				l.attrs["err"] = a.Value.String()
			case a.Key == "pgtx" && a.Value.Kind() == slog.KindGroup:
				for _, g := range a.Value.Group() {
					if _, dup := l.attrs[g.Key]; dup || g.Key == "err" {
						t.Errorf("%q: attribute %q twice", r.Message, g.Key)
					}
					l.attrs[g.Key] = g.Value.Resolve().String()
				}
			default:
				t.Errorf("%q: unexpected top-level attribute %s = %v", r.Message, a.Key, a.Value)
			}
			return true
		})
		if n := len(top); n == 0 || top[n-1] != "pgtx" || n > 2 || n == 2 && top[0] != "err" {
			t.Errorf("%q: top-level attributes %q, want [err] pgtx", r.Message, top)
		}
		out = append(out, l)
	}
	return out
}

// assertLines checks that h received exactly want.
func assertLines(t *testing.T, h *recorder, want ...line) {
	t.Helper()
	got := h.lines(t)
	if len(got) != len(want) {
		t.Fatalf("got %d lines %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.level != w.level || g.msg != w.msg {
			t.Errorf("line %d: got %v %q, want %v %q", i, g.level, g.msg, w.level, w.msg)
		}
		for k, v := range w.attrs {
			if gv, ok := g.attrs[k]; !ok {
				t.Errorf("line %d (%q): attribute %q missing, want %q", i, g.msg, k, v)
			} else if gv != v {
				t.Errorf("line %d (%q): %s = %q, want %q", i, g.msg, k, gv, v)
			}
		}
		for k, v := range g.attrs {
			if _, ok := w.attrs[k]; !ok {
				t.Errorf("line %d (%q): unexpected attribute %s = %q", i, g.msg, k, v)
			}
		}
	}
}

func pgErr(code string) *pgconn.PgError {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "boom"}
}

// errText renders err as the handler receives it.
func errText(err error) string { return slog.AnyValue(err).String() }

var (
	errConflict     = pgErr(pgerrcode.SerializationFailure)
	errDeadlock     = pgErr(pgerrcode.DeadlockDetected)
	errOverload     = pgErr(pgerrcode.TooManyConnections)
	errConnLost     = pgErr(pgerrcode.AdminShutdown)
	errUnique       = pgErr("23505")
	errDiskFull     = pgErr("53100")
	errInternal     = pgErr("XX000")
	errStmtTimeout  = pgErr(pgerrcode.QueryCanceled)
	errSyntax       = pgErr("42601")
	errCommitLost   = fmt.Errorf("%w: %w", pgtx.ErrCommitUnknown, io.ErrUnexpectedEOF)
	errBudget       = fmt.Errorf("%w: %w", pgtx.ErrRetryBudgetExhausted, errOverload)
	errCaller       = errors.New("insufficient funds")
	errCanceled     = fmt.Errorf("%w: %w", context.Canceled, errStmtTimeout)
	errDeadline     = fmt.Errorf("%w: %w", context.DeadlineExceeded, errStmtTimeout)
	errNonRetryable = pgtx.NonRetryable(errConflict)
)

func TestTraceAttemptEnd(t *testing.T) {
	t.Parallel()
	end := func(err error, retry bool, backoff time.Duration) pgtx.TraceAttemptEndData {
		return pgtx.TraceAttemptEndData{
			Label: "transfer", Isolation: pgtx.Serializable, Attempt: 2,
			Err: err, Class: pgtx.Classify(err), Duration: 12 * time.Millisecond,
			Retry: retry, Backoff: backoff,
		}
	}
	retry := func(level slog.Level, class, code string, err error, backoff string) line {
		return line{level, "retrying transaction", map[string]string{
			"label": "transfer", "isolation": "SERIALIZABLE", "attempt": "2",
			"class": class, "sqlstate": code, "err": errText(err),
			"backoff": backoff, "duration": "12ms",
		}}
	}
	tests := []logCase[pgtx.TraceAttemptEndData]{
		{
			name: "conflict retry at debug",
			data: end(errConflict, true, 3*time.Millisecond),
			want: []line{retry(slog.LevelDebug, "conflict", "40001", errConflict, "3ms")},
		},
		{
			name: "deadlock retry at debug",
			data: end(errDeadlock, true, time.Millisecond),
			want: []line{retry(slog.LevelDebug, "conflict", "40P01", errDeadlock, "1ms")},
		},
		{
			name: "overload retry at warn with backoff",
			data: end(errOverload, true, 250*time.Millisecond),
			want: []line{retry(slog.LevelWarn, "overload", "53300", errOverload, "250ms")},
		},
		{
			name: "connection lost retry at warn",
			data: end(errConnLost, true, 0),
			want: []line{retry(slog.LevelWarn, "connection_lost", "57P01", errConnLost, "0s")},
		},
		{
			name: "connection lost without sqlstate",
			data: end(io.ErrUnexpectedEOF, true, 0),
			want: []line{{slog.LevelWarn, "retrying transaction", map[string]string{
				"label": "transfer", "isolation": "SERIALIZABLE", "attempt": "2",
				"class": "connection_lost", "err": errText(io.ErrUnexpectedEOF),
				"backoff": "0s", "duration": "12ms",
			}}},
		},
		{
			name: "last attempt not logged by default",
			data: end(errUnique, false, 0),
		},
		{
			name: "committed attempt not logged by default",
			data: end(nil, false, 0),
		},
		{
			name: "last failed attempt with LogAttempts",
			opts: pgtxslog.WithLevels(levels{pgtxslog.Attempt: slog.LevelDebug}),
			data: end(errUnique, false, 0),
			want: []line{{slog.LevelDebug, "attempt finished", map[string]string{
				"label": "transfer", "isolation": "SERIALIZABLE", "attempt": "2",
				"class": "permanent", "sqlstate": "23505", "err": errText(errUnique),
				"duration": "12ms",
			}}},
		},
		{
			name: "committed attempt with LogAttempts at its level",
			opts: pgtxslog.WithLevels(levels{pgtxslog.Attempt: slog.LevelInfo}),
			data: end(nil, false, 0),
			want: []line{{slog.LevelInfo, "attempt finished", map[string]string{
				"label": "transfer", "isolation": "SERIALIZABLE", "attempt": "2",
				"duration": "12ms",
			}}},
		},
		{
			name: "retry with LogAttempts is one line",
			opts: pgtxslog.WithLevels(levels{pgtxslog.Attempt: slog.LevelDebug}),
			data: end(errConflict, true, 3*time.Millisecond),
			want: []line{retry(slog.LevelDebug, "conflict", "40001", errConflict, "3ms")},
		},
		{
			name: "conflict level overridden",
			opts: pgtxslog.WithLevels(levels{pgtxslog.RetryConflict: slog.LevelInfo}),
			data: end(errConflict, true, 3*time.Millisecond),
			want: []line{retry(slog.LevelInfo, "conflict", "40001", errConflict, "3ms")},
		},
		{
			name: "overload retry off",
			opts: pgtxslog.WithLevels(levels{pgtxslog.RetryOverload: pgtxslog.LevelOff}),
			data: end(errOverload, true, time.Second),
		},
	}
	runLogCases(t, tests, (*pgtxslog.Tracer).TraceAttemptEnd)
}

func TestTraceTransactionEnd(t *testing.T) {
	t.Parallel()
	end := func(label string, err error) pgtx.TraceTransactionEndData {
		class := pgtx.Classify(err)
		return pgtx.TraceTransactionEndData{
			Label: label, Isolation: pgtx.ReadCommitted, Attempts: 3,
			Err: err, Class: class, Duration: 1500 * time.Millisecond,
		}
	}
	failed := func(level slog.Level, class, code string, err error) line {
		l := line{level, "transaction failed", map[string]string{
			"label": "pay", "isolation": "READ COMMITTED", "attempts": "3",
			"class": class, "err": errText(err), "duration": "1.5s",
		}}
		if code != "" {
			l.attrs["sqlstate"] = code
		}
		return l
	}
	tests := []logCase[pgtx.TraceTransactionEndData]{
		{
			name: "success not logged by default",
			data: end("pay", nil),
		},
		{
			name: "success logged with LogSuccess",
			opts: pgtxslog.WithLevels(levels{pgtxslog.Committed: slog.LevelDebug}),
			data: end("pay", nil),
			want: []line{{slog.LevelDebug, "transaction committed", map[string]string{
				"label": "pay", "isolation": "READ COMMITTED",
				"attempts": "3", "duration": "1.5s",
			}}},
		},
		{
			name: "success without label",
			opts: pgtxslog.WithLevels(levels{pgtxslog.Committed: slog.LevelInfo}),
			data: end("", nil),
			want: []line{{slog.LevelInfo, "transaction committed", map[string]string{
				"isolation": "READ COMMITTED", "attempts": "3", "duration": "1.5s",
			}}},
		},
		{
			name: "commit unknown at error",
			data: end("pay", errCommitLost),
			want: []line{{slog.LevelError, "commit outcome unknown", map[string]string{
				"label": "pay", "isolation": "READ COMMITTED", "attempts": "3",
				"class": "ambiguous", "err": errText(errCommitLost), "duration": "1.5s",
			}}},
		},
		{
			name: "commit unknown wrapped in NonRetryable still at error",
			data: end("pay", pgtx.NonRetryable(errCommitLost)),
			want: []line{{slog.LevelError, "commit outcome unknown", map[string]string{
				"label": "pay", "isolation": "READ COMMITTED", "attempts": "3",
				"class": "ambiguous", "err": errText(errCommitLost), "duration": "1.5s",
			}}},
		},
		{
			name: "conflict retries ran out at warn",
			data: end("pay", errConflict),
			want: []line{failed(slog.LevelWarn, "conflict", "40001", errConflict)},
		},
		{
			name: "overload retries ran out at warn",
			data: end("pay", errOverload),
			want: []line{failed(slog.LevelWarn, "overload", "53300", errOverload)},
		},
		{
			name: "statement timeout at warn",
			data: end("pay", errStmtTimeout),
			want: []line{failed(slog.LevelWarn, "timeout", "57014", errStmtTimeout)},
		},
		{
			name: "deadline at warn",
			data: end("pay", errDeadline),
			want: []line{failed(slog.LevelWarn, "timeout", "57014", errDeadline)},
		},
		{
			name: "acquire timeout at warn",
			data: end("pay", pgtx.ErrAcquireTimeout),
			want: []line{failed(slog.LevelWarn, "timeout", "", pgtx.ErrAcquireTimeout)},
		},
		{
			name: "caller cancelled at debug",
			data: end("pay", errCanceled),
			want: []line{failed(slog.LevelDebug, "timeout", "57014", errCanceled)},
		},
		{
			name: "constraint violation at debug",
			data: end("pay", errUnique),
			want: []line{failed(slog.LevelDebug, "permanent", "23505", errUnique)},
		},
		{
			name: "syntax error at debug",
			data: end("pay", errSyntax),
			want: []line{failed(slog.LevelDebug, "permanent", "42601", errSyntax)},
		},
		{
			name: "caller error at debug",
			data: end("pay", errCaller),
			want: []line{failed(slog.LevelDebug, "permanent", "", errCaller)},
		},
		{
			name: "NonRetryable conflict at debug",
			data: end("pay", errNonRetryable),
			want: []line{failed(slog.LevelDebug, "permanent", "40001", errNonRetryable)},
		},
		{
			name: "disk full at error",
			data: end("pay", errDiskFull),
			want: []line{failed(slog.LevelError, "permanent", "53100", errDiskFull)},
		},
		{
			name: "internal error at error",
			data: end("pay", errInternal),
			want: []line{failed(slog.LevelError, "permanent", "XX000", errInternal)},
		},
		{
			name: "budget refusal not logged again",
			data: end("pay", errBudget),
		},
		{
			name: "permanent level overridden",
			opts: pgtxslog.WithLevels(levels{pgtxslog.FailedPermanent: slog.LevelInfo}),
			data: end("pay", errUnique),
			want: []line{failed(slog.LevelInfo, "permanent", "23505", errUnique)},
		},
		{
			name: "commit unknown off",
			opts: pgtxslog.WithLevels(levels{pgtxslog.CommitUnknown: pgtxslog.LevelOff}),
			data: end("pay", errCommitLost),
		},
	}
	runLogCases(t, tests, (*pgtxslog.Tracer).TraceTransactionEnd)
}

// TestBudgetRefusal: a retry the budget refused is an attempt end with no
// retry and an error matching pgtx.ErrRetryBudgetExhausted.
func TestBudgetRefusal(t *testing.T) {
	t.Parallel()
	lostBudget := fmt.Errorf("%w: %w", pgtx.ErrRetryBudgetExhausted, io.EOF)
	tests := []logCase[pgtx.TraceAttemptEndData]{
		{
			name: "overload refusal at warn",
			data: pgtx.TraceAttemptEndData{Label: "pay", Isolation: pgtx.ReadCommitted, Attempt: 2, Err: errBudget, Class: pgtx.ClassOverload},
			want: []line{{slog.LevelWarn, "retry budget exhausted", map[string]string{
				"label": "pay", "isolation": "READ COMMITTED", "attempt": "2", "class": "overload",
				"sqlstate": "53300", "err": errText(errBudget),
			}}},
		},
		{
			name: "connection lost refusal without label",
			data: pgtx.TraceAttemptEndData{Isolation: pgtx.Serializable, Attempt: 1, Err: lostBudget, Class: pgtx.ClassConnectionLost},
			want: []line{{slog.LevelWarn, "retry budget exhausted", map[string]string{
				"isolation": "SERIALIZABLE", "attempt": "1", "class": "connection_lost", "err": errText(lostBudget),
			}}},
		},
		{
			name: "level overridden",
			opts: pgtxslog.WithLevels(levels{pgtxslog.BudgetExhausted: slog.LevelError}),
			data: pgtx.TraceAttemptEndData{Isolation: pgtx.Serializable, Attempt: 1, Err: lostBudget, Class: pgtx.ClassConnectionLost},
			want: []line{{slog.LevelError, "retry budget exhausted", map[string]string{
				"isolation": "SERIALIZABLE", "attempt": "1", "class": "connection_lost", "err": errText(lostBudget),
			}}},
		},
		{
			name: "refusal then the attempt with LogAttempts",
			opts: pgtxslog.WithLevels(levels{pgtxslog.Attempt: slog.LevelDebug}),
			data: pgtx.TraceAttemptEndData{Label: "pay", Isolation: pgtx.ReadCommitted, Attempt: 2, Err: errBudget, Class: pgtx.ClassOverload, Duration: 3 * time.Millisecond},
			want: []line{
				{slog.LevelWarn, "retry budget exhausted", map[string]string{
					"label": "pay", "isolation": "READ COMMITTED", "attempt": "2", "class": "overload",
					"sqlstate": "53300", "err": errText(errBudget),
				}},
				{slog.LevelDebug, "attempt finished", map[string]string{
					"label": "pay", "isolation": "READ COMMITTED", "attempt": "2", "class": "overload",
					"sqlstate": "53300", "err": errText(errBudget), "duration": "3ms",
				}},
			},
		},
		{
			name: "refusal off",
			opts: pgtxslog.WithLevels(levels{pgtxslog.BudgetExhausted: pgtxslog.LevelOff}),
			data: pgtx.TraceAttemptEndData{Attempt: 1, Err: errBudget, Class: pgtx.ClassOverload},
		},
		{
			// The budget is only asked for a retry that would follow: an
			// error matching the sentinel with Retry set is a retry line.
			name: "retry is not a refusal",
			data: pgtx.TraceAttemptEndData{Attempt: 1, Err: lostBudget, Class: pgtx.ClassConnectionLost, Retry: true},
			want: []line{{slog.LevelWarn, "retrying transaction", map[string]string{
				"isolation": "Isolation(0)", "attempt": "1", "class": "connection_lost", "err": errText(lostBudget),
				"backoff": "0s", "duration": "0s",
			}}},
		},
	}
	runLogCases(t, tests, (*pgtxslog.Tracer).TraceAttemptEnd)
}

// TestBudgetRefusalIsOneLine replays the events of a call the budget
// refused, in pgtx's order: one line in all.
func TestBudgetRefusalIsOneLine(t *testing.T) {
	t.Parallel()
	h, tr := newRecorder(slog.LevelDebug, nil)
	ctx := context.Background()
	ctx = tr.TraceTransactionStart(ctx, pgtx.TraceTransactionStartData{Label: "pay", Isolation: pgtx.Serializable})
	actx := tr.TraceAttemptStart(ctx, pgtx.TraceAttemptStartData{Label: "pay", Isolation: pgtx.Serializable, Attempt: 1})
	tr.TraceAttemptEnd(actx, pgtx.TraceAttemptEndData{Label: "pay", Isolation: pgtx.Serializable, Attempt: 1, Err: errBudget, Class: pgtx.ClassOverload})
	tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Label: "pay", Isolation: pgtx.Serializable, Attempts: 1, Err: errBudget, Class: pgtx.Classify(errBudget)})
	assertLines(t, h, line{slog.LevelWarn, "retry budget exhausted", map[string]string{
		"label": "pay", "isolation": "SERIALIZABLE", "attempt": "1", "class": "overload",
		"sqlstate": "53300", "err": errText(errBudget),
	}})
}

func TestTraceCancel(t *testing.T) {
	t.Parallel()
	cancelLine := func(level slog.Level, mode, outcome, fellBack string) line {
		return line{level, "statement cancelled", map[string]string{
			"pid": "4242", "cancel_mode": mode, "cancel_outcome": outcome,
			"fell_back": fellBack, "latency": "800µs",
		}}
	}
	data := func(mode pgtx.CancelMode, closed, notFound, fellBack bool) pgtx.TraceCancelData {
		return pgtx.TraceCancelData{PID: 4242, Mode: mode, Closed: closed, NotFound: notFound, FellBack: fellBack, Latency: 800 * time.Microsecond}
	}
	tests := []logCase[pgtx.TraceCancelData]{
		{
			name: "signalled at debug",
			data: data(pgtx.CancelModePool, false, false, false),
			want: []line{cancelLine(slog.LevelDebug, "pool", "signalled", "false")},
		},
		{
			name: "backend gone at debug",
			data: data(pgtx.CancelModePool, false, true, false),
			want: []line{cancelLine(slog.LevelDebug, "pool", "not_found", "false")},
		},
		{
			name: "protocol mode at debug",
			data: data(pgtx.CancelModeProtocol, false, false, false),
			want: []line{cancelLine(slog.LevelDebug, "protocol", "protocol", "false")},
		},
		{
			name: "close mode at debug",
			data: data(pgtx.CancelModeClose, true, false, false),
			want: []line{cancelLine(slog.LevelDebug, "close", "closed", "false")},
		},
		{
			name: "pool fell back to protocol at warn",
			data: data(pgtx.CancelModePool, false, false, true),
			want: []line{cancelLine(slog.LevelWarn, "pool", "protocol", "true")},
		},
		{
			name: "pool fell back to close at warn",
			data: data(pgtx.CancelModePool, true, false, true),
			want: []line{cancelLine(slog.LevelWarn, "pool", "closed", "true")},
		},
		{
			name: "closed in pool mode without fallback flag at warn",
			data: data(pgtx.CancelModePool, true, false, false),
			want: []line{cancelLine(slog.LevelWarn, "pool", "closed", "false")},
		},
		{
			name: "closed in protocol mode at warn",
			data: data(pgtx.CancelModeProtocol, true, false, false),
			want: []line{cancelLine(slog.LevelWarn, "protocol", "closed", "false")},
		},
		{
			name: "fallback level overridden",
			opts: pgtxslog.WithLevels(levels{pgtxslog.CancelFallback: slog.LevelError}),
			data: data(pgtx.CancelModePool, false, false, true),
			want: []line{cancelLine(slog.LevelError, "pool", "protocol", "true")},
		},
		{
			name: "unknown mode",
			data: data(pgtx.CancelMode(7), false, false, false),
			want: []line{cancelLine(slog.LevelDebug, "CancelMode(7)", "unknown", "false")},
		},
		{
			name: "cancel off",
			opts: pgtxslog.WithLevels(levels{pgtxslog.Cancel: pgtxslog.LevelOff}),
			data: data(pgtx.CancelModePool, false, false, false),
		},
	}
	runLogCases(t, tests, (*pgtxslog.Tracer).TraceCancel)
}

func TestTraceBreakerStateChange(t *testing.T) {
	t.Parallel()
	change := func(name string, from, to pgtx.BreakerState, reason string) pgtx.TraceBreakerStateChangeData {
		return pgtx.TraceBreakerStateChangeData{Name: name, From: from, To: to, Reason: reason, Calls: 12, Failures: 7, Slow: 1}
	}
	changeLine := func(level slog.Level, name, from, to, reason string) line {
		l := line{level, "circuit breaker state changed", map[string]string{
			"from": from, "to": to, "reason": reason,
			"calls": "12", "failures": "7", "slow": "1",
		}}
		if name != "" {
			l.attrs["breaker"] = name
		}
		return l
	}
	tests := []logCase[pgtx.TraceBreakerStateChangeData]{
		{
			name: "opened at warn",
			data: change("replica", pgtx.BreakerClosed, pgtx.BreakerOpen, "failure ratio 7/12"),
			want: []line{changeLine(slog.LevelWarn, "replica", "closed", "open", "failure ratio 7/12")},
		},
		{
			name: "reopened from half-open at warn",
			data: change("replica", pgtx.BreakerHalfOpen, pgtx.BreakerOpen, "half-open probe failed"),
			want: []line{changeLine(slog.LevelWarn, "replica", "half-open", "open", "half-open probe failed")},
		},
		{
			name: "half-open at info",
			data: change("replica", pgtx.BreakerOpen, pgtx.BreakerHalfOpen, "open for 5s"),
			want: []line{changeLine(slog.LevelInfo, "replica", "open", "half-open", "open for 5s")},
		},
		{
			name: "closed at info, without a name",
			data: change("", pgtx.BreakerHalfOpen, pgtx.BreakerClosed, "half-open probes succeeded"),
			want: []line{changeLine(slog.LevelInfo, "", "half-open", "closed", "half-open probes succeeded")},
		},
		{
			name: "levels overridden",
			opts: pgtxslog.WithLevels(levels{pgtxslog.BreakerOpened: slog.LevelError, pgtxslog.BreakerChanged: slog.LevelDebug}),
			data: change("replica", pgtx.BreakerOpen, pgtx.BreakerClosed, "open for 5s, no probes"),
			want: []line{changeLine(slog.LevelDebug, "replica", "open", "closed", "open for 5s, no probes")},
		},
		{
			name: "opened off",
			opts: pgtxslog.WithLevels(levels{pgtxslog.BreakerOpened: pgtxslog.LevelOff}),
			data: change("replica", pgtx.BreakerClosed, pgtx.BreakerOpen, "5 consecutive failures"),
		},
	}
	runLogCases(t, tests, (*pgtxslog.Tracer).TraceBreakerStateChange)
}

type ctxKey struct{}

func TestStartReturnsContextUnchanged(t *testing.T) {
	t.Parallel()
	h, tr := newRecorder(slog.LevelDebug, pgtxslog.WithLevels(levels{pgtxslog.Committed: slog.LevelDebug, pgtxslog.Attempt: slog.LevelDebug}))
	ctx := context.WithValue(context.Background(), ctxKey{}, "trace-1")
	if got := tr.TraceTransactionStart(ctx, pgtx.TraceTransactionStartData{Label: "x", Isolation: pgtx.Serializable}); got != ctx {
		t.Errorf("TraceTransactionStart returned another context")
	}
	if got := tr.TraceAttemptStart(ctx, pgtx.TraceAttemptStartData{Label: "x", Isolation: pgtx.Serializable, Attempt: 1}); got != ctx {
		t.Errorf("TraceAttemptStart returned another context")
	}
	assertLines(t, h)
}

// TestHookContextReachesHandler checks that each line is handled with the
// context of its hook, where a handler finds trace ids.
func TestHookContextReachesHandler(t *testing.T) {
	t.Parallel()
	h, tr := newRecorder(slog.LevelDebug, pgtxslog.WithLevels(levels{pgtxslog.Committed: slog.LevelDebug}))
	ctx := context.WithValue(context.Background(), ctxKey{}, "trace-1")
	tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Attempt: 1, Err: errConflict, Class: pgtx.ClassConflict, Retry: true})
	tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Attempts: 2})
	tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Attempt: 1, Err: errBudget, Class: pgtx.ClassOverload})
	tr.TraceCancel(ctx, pgtx.TraceCancelData{PID: 1, Mode: pgtx.CancelModePool})
	tr.TraceBreakerStateChange(ctx, pgtx.TraceBreakerStateChangeData{From: pgtx.BreakerClosed, To: pgtx.BreakerOpen})
	tr.TraceContention(ctx, pgtx.TraceContentionData{Label: "x", Limiting: true, Limit: 2})
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ctxs) != 6 {
		t.Fatalf("got %d lines, want 6", len(h.ctxs))
	}
	for i, c := range h.ctxs {
		if c.Value(ctxKey{}) != "trace-1" {
			t.Errorf("line %d (%q): handler did not get the hook's context", i, h.records[i].Message)
		}
	}
}

// TestDisabledLevelLogsNothing drives every kind of line into a handler
// enabled from Error: only the Error lines get through.
func TestDisabledLevelLogsNothing(t *testing.T) {
	t.Parallel()
	h, tr := newRecorder(slog.LevelError, pgtxslog.WithLevels(levels{pgtxslog.Committed: slog.LevelDebug, pgtxslog.Attempt: slog.LevelDebug}))
	ctx := context.Background()
	for _, err := range []error{errConflict, errOverload, errConnLost} {
		tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Attempt: 1, Err: err, Class: pgtx.Classify(err), Retry: true})
	}
	tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Attempt: 1, Err: errUnique, Class: pgtx.ClassPermanent})
	for _, err := range []error{nil, errConflict, errStmtTimeout, errCanceled, errUnique, errCaller} {
		tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Attempts: 1, Err: err, Class: pgtx.Classify(err)})
	}
	tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Attempt: 1, Err: errBudget, Class: pgtx.ClassOverload})
	tr.TraceCancel(ctx, pgtx.TraceCancelData{Mode: pgtx.CancelModePool})
	tr.TraceCancel(ctx, pgtx.TraceCancelData{Mode: pgtx.CancelModeProtocol, FellBack: true})
	tr.TraceBreakerStateChange(ctx, pgtx.TraceBreakerStateChangeData{From: pgtx.BreakerClosed, To: pgtx.BreakerOpen})
	tr.TraceBreakerStateChange(ctx, pgtx.TraceBreakerStateChangeData{From: pgtx.BreakerOpen, To: pgtx.BreakerHalfOpen})
	tr.TraceContention(ctx, pgtx.TraceContentionData{Limiting: true, Limit: 2})
	tr.TraceContention(ctx, pgtx.TraceContentionData{Limiting: true, Limit: 3, Previous: 2})
	tr.TraceContention(ctx, pgtx.TraceContentionData{Previous: 3})
	assertLines(t, h)

	tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Attempts: 1, Err: errCommitLost, Class: pgtx.ClassAmbiguous})
	tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Attempts: 1, Err: errDiskFull, Class: pgtx.ClassPermanent})
	got := h.lines(t)
	if len(got) != 2 || got[0].msg != "commit outcome unknown" || got[1].msg != "transaction failed" {
		t.Errorf("Error lines: got %v, want commit unknown then failed", got)
	}
}

// TestDisabledLevelAllocs checks that a line whose level the handler
// disables costs no allocation.
func TestDisabledLevelAllocs(t *testing.T) {
	h, tr := newRecorder(slog.LevelError, pgtxslog.WithLevels(levels{pgtxslog.Committed: slog.LevelDebug, pgtxslog.Attempt: slog.LevelDebug}))
	// off writes to a handler enabled from Debug, but its kinds are off.
	hOff, off := newRecorder(slog.LevelDebug, pgtxslog.WithLevels(levels{pgtxslog.RetryConflict: pgtxslog.LevelOff}))
	ctx := context.Background()
	tests := []struct {
		name string
		fn   func()
	}{
		{"TraceAttemptEnd conflict retry", func() {
			tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Label: "x", Isolation: pgtx.Serializable, Attempt: 1, Err: errConflict, Class: pgtx.ClassConflict, Retry: true, Backoff: time.Millisecond})
		}},
		{"TraceAttemptEnd overload retry", func() {
			tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Label: "x", Isolation: pgtx.Serializable, Attempt: 1, Err: errOverload, Class: pgtx.ClassOverload, Retry: true, Backoff: time.Second})
		}},
		{"TraceAttemptEnd last attempt", func() {
			tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Label: "x", Isolation: pgtx.Serializable, Attempt: 1, Err: errUnique, Class: pgtx.ClassPermanent})
		}},
		{"TraceTransactionEnd success", func() {
			tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Label: "x", Isolation: pgtx.Serializable, Attempts: 1})
		}},
		{"TraceTransactionEnd constraint violation", func() {
			tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Label: "x", Isolation: pgtx.Serializable, Attempts: 1, Err: errUnique, Class: pgtx.ClassPermanent})
		}},
		{"TraceTransactionEnd timeout", func() {
			tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Label: "x", Isolation: pgtx.Serializable, Attempts: 1, Err: errDeadline, Class: pgtx.ClassTimeout})
		}},
		{"TraceAttemptEnd budget refusal", func() {
			tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Label: "x", Isolation: pgtx.Serializable, Attempt: 1, Err: errBudget, Class: pgtx.ClassOverload})
		}},
		{"TraceCancel fallback", func() {
			tr.TraceCancel(ctx, pgtx.TraceCancelData{PID: 1, Mode: pgtx.CancelModeClose, FellBack: true})
		}},
		{"TraceBreakerStateChange open", func() {
			tr.TraceBreakerStateChange(ctx, pgtx.TraceBreakerStateChangeData{Name: "x", From: pgtx.BreakerClosed, To: pgtx.BreakerOpen, Reason: "5 consecutive failures"})
		}},
		{"TraceContention start", func() {
			tr.TraceContention(ctx, pgtx.TraceContentionData{Label: "x", Limiting: true, Limit: 4, ConflictRatio: 0.3})
		}},
		{"TraceContention change", func() {
			tr.TraceContention(ctx, pgtx.TraceContentionData{Label: "x", Limiting: true, Limit: 6, Previous: 4, ConflictRatio: 0.2})
		}},
		{"TraceAttemptEnd retry under the gate", func() {
			tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Label: "x", Attempt: 1, Err: errConflict, Class: pgtx.ClassConflict, Retry: true, AdmissionWait: time.Millisecond, Limit: 4})
		}},
		{"TraceTransactionEnd success, off by default", func() {
			off.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Label: "x", Isolation: pgtx.Serializable, Attempts: 1})
		}},
		{"TraceAttemptEnd conflict retry, LevelOff", func() {
			off.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Label: "x", Attempt: 1, Err: errConflict, Class: pgtx.ClassConflict, Retry: true})
		}},
		{"TraceAttemptStart", func() {
			_ = tr.TraceAttemptStart(ctx, pgtx.TraceAttemptStartData{Label: "x", Isolation: pgtx.Serializable, Attempt: 1})
		}},
		{"TraceTransactionStart", func() {
			_ = tr.TraceTransactionStart(ctx, pgtx.TraceTransactionStartData{Label: "x", Isolation: pgtx.Serializable})
		}},
	}
	for _, tt := range tests {
		if allocs := testing.AllocsPerRun(100, tt.fn); allocs != 0 {
			t.Errorf("%s: %v allocations per run at a disabled level, want 0", tt.name, allocs)
		}
	}
	assertLines(t, h)
	assertLines(t, hOff)
}

// TestLevelVar checks that a *slog.LevelVar level is read at each event.
func TestLevelVar(t *testing.T) {
	t.Parallel()
	var lv slog.LevelVar // Info
	h, tr := newRecorder(slog.LevelInfo, pgtxslog.WithLevels(levels{pgtxslog.RetryConflict: &lv}))
	data := pgtx.TraceAttemptEndData{Attempt: 1, Err: errConflict, Class: pgtx.ClassConflict, Retry: true}
	tr.TraceAttemptEnd(context.Background(), data)
	lv.Set(slog.LevelDebug)
	tr.TraceAttemptEnd(context.Background(), data)
	got := h.lines(t)
	if len(got) != 1 || got[0].level != slog.LevelInfo {
		t.Errorf("got %v, want one Info line", got)
	}
}

// TestNilLoggerUsesDefault checks that a nil logger writes to slog.Default()
// as it is at the time of the event, and that neither nil options, an
// empty levels map, the zero Tracer nor a nil *Tracer panics. It changes the
// default logger, so it does not run in parallel.
func TestNilLoggerUsesDefault(t *testing.T) {
	old := slog.Default()
	t.Cleanup(func() { slog.SetDefault(old) })
	var nilTracer *pgtxslog.Tracer
	tracers := []struct {
		name string
		tr   *pgtxslog.Tracer
	}{
		{"NewTracer()", pgtxslog.NewTracer()},
		{"NewTracer(WithLogger(nil), nil, WithLevels(nil))", pgtxslog.NewTracer(pgtxslog.WithLogger(nil), nil, pgtxslog.WithLevels(nil))},
		{"zero Tracer", &pgtxslog.Tracer{}},
		{"nil *Tracer", nilTracer},
	}
	for _, tt := range tracers {
		h := &recorder{min: slog.LevelDebug}
		slog.SetDefault(slog.New(h))
		ctx := tt.tr.TraceTransactionStart(context.Background(), pgtx.TraceTransactionStartData{})
		ctx = tt.tr.TraceAttemptStart(ctx, pgtx.TraceAttemptStartData{Attempt: 1})
		tt.tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Attempt: 1, Err: errOverload, Class: pgtx.ClassOverload, Retry: true})
		tt.tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Attempts: 1})
		tt.tr.TraceCancel(ctx, pgtx.TraceCancelData{Mode: pgtx.CancelModePool})
		tt.tr.TraceBreakerStateChange(ctx, pgtx.TraceBreakerStateChangeData{To: pgtx.BreakerHalfOpen})
		tt.tr.TraceContention(ctx, pgtx.TraceContentionData{Limiting: true, Limit: 1})
		got := h.lines(t)
		want := []string{"retrying transaction", "statement cancelled", "circuit breaker state changed", "contention limit changed"}
		if len(got) != len(want) || got[0].level != slog.LevelWarn {
			t.Errorf("%s: got %v, want a Warn retry line, then %q", tt.name, got, want[1:])
			continue
		}
		for i := range want {
			if got[i].msg != want[i] {
				t.Errorf("%s: line %d is %q, want %q", tt.name, i, got[i].msg, want[i])
			}
		}
	}
}

// TestPoolEvents sets a Tracer as a pool's Config.Tracer: a call that cannot
// connect is logged, and so is the circuit breaker it opens, without setting
// BreakerConfig.Tracer. The pool never reaches a server (nothing listens on
// port 1) and starts no background connection (CancelModeProtocol).
func TestPoolEvents(t *testing.T) {
	t.Parallel()
	h, tr := newRecorder(slog.LevelDebug, nil)
	cfg, err := pgtx.ParseConfig("postgres://pgtx@127.0.0.1:1/pgtx?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	cfg.CancelMode = pgtx.CancelModeProtocol
	cfg.Retry.MaxRetries, cfg.Retry.MaxAdaptiveRetries, cfg.Retry.UnavailableTimeout = -1, -1, -1
	cfg.Breaker = &pgtx.BreakerConfig{Name: "offline", ConsecutiveFailures: 1, OpenFor: time.Hour}
	cfg.Tracer = tr
	pool, err := pgtx.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	err = pgtx.TransactionWithOptions(context.Background(), pool, pgtx.ReadCommitted, pgtx.Options{Label: "probe"},
		func(context.Context, pgx.Tx) error { return nil })
	if err == nil {
		t.Fatal("Transaction on a closed port succeeded")
	}
	var failed, opened int
	for _, l := range h.lines(t) {
		switch l.msg {
		case "transaction failed":
			failed++
			if l.attrs["label"] != "probe" || l.attrs["attempts"] != "1" {
				t.Errorf("failed line %v: want label probe, 1 attempt", l.attrs)
			}
		case "circuit breaker state changed":
			opened++
			if l.level != slog.LevelWarn || l.attrs["breaker"] != "offline" ||
				l.attrs["from"] != "closed" || l.attrs["to"] != "open" {
				t.Errorf("breaker line %v %v: want Warn, offline, closed to open", l.level, l.attrs)
			}
		default:
			t.Errorf("unexpected line %q %v", l.msg, l.attrs)
		}
	}
	if failed != 1 || opened != 1 {
		t.Errorf("%d failed and %d breaker lines, want 1 and 1", failed, opened)
	}

	// The pool's Stats, with the main pool's connections and the breaker.
	got := flatten(pgtxslog.Stats(pool.Stats()).LogValue())
	want := map[string]string{
		"transactions": "1", "conns.max": fmt.Sprint(cfg.MaxConns), "conns.acquired": "0",
		"breaker.name": "offline", "breaker.state": "open", "breaker.opened": "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Stats: %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}
