package pgtxslog_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/failover"
	"github.com/pgtx-go/pgtx/pgtxslog"
	"github.com/pgtx-go/pgtx/pooler"
	"github.com/pgtx-go/pgtx/slots"
)

// trigger is an event that makes a Tracer write a line of one kind.
type trigger struct {
	event pgtxslog.Event
	name  string // the kind's String
	level slog.Level
	msg   string
	fire  func(context.Context, *pgtxslog.Tracer)
}

// triggers lists every kind of line with its default level and message:
// the table of docs/observability.md.
func triggers() []trigger {
	retry := func(err error) func(context.Context, *pgtxslog.Tracer) {
		return func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Attempt: 1, Err: err, Class: pgtx.Classify(err), Retry: true})
		}
	}
	end := func(err error) func(context.Context, *pgtxslog.Tracer) {
		return func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Attempts: 1, Err: err, Class: pgtx.Classify(err)})
		}
	}
	return []trigger{
		{pgtxslog.RetryConflict, "retry_conflict", slog.LevelDebug, "retrying transaction", retry(errConflict)},
		{pgtxslog.RetryOverload, "retry_overload", slog.LevelWarn, "retrying transaction", retry(errOverload)},
		{pgtxslog.RetryConnectionLost, "retry_connection_lost", slog.LevelWarn, "retrying transaction", retry(errConnLost)},
		{pgtxslog.BudgetExhausted, "budget_exhausted", slog.LevelWarn, "retry budget exhausted", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Attempt: 1, Err: errBudget, Class: pgtx.ClassOverload})
		}},
		{pgtxslog.CommitUnknown, "commit_unknown", slog.LevelError, "commit outcome unknown", end(errCommitLost)},
		{pgtxslog.FailedRetryable, "failed_retryable", slog.LevelWarn, "transaction failed", end(errConflict)},
		{pgtxslog.FailedTimeout, "failed_timeout", slog.LevelWarn, "transaction failed", end(errDeadline)},
		{pgtxslog.FailedCanceled, "failed_canceled", slog.LevelDebug, "transaction failed", end(errCanceled)},
		{pgtxslog.FailedServer, "failed_server", slog.LevelError, "transaction failed", end(errDiskFull)},
		{pgtxslog.FailedPermanent, "failed_permanent", slog.LevelDebug, "transaction failed", end(errUnique)},
		{pgtxslog.Cancel, "cancel", slog.LevelDebug, "statement cancelled", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceCancel(ctx, pgtx.TraceCancelData{PID: 1, Mode: pgtx.CancelModePool})
		}},
		{pgtxslog.CancelFallback, "cancel_fallback", slog.LevelWarn, "statement cancelled", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceCancel(ctx, pgtx.TraceCancelData{PID: 1, Mode: pgtx.CancelModePool, FellBack: true})
		}},
		{pgtxslog.BreakerOpened, "breaker_opened", slog.LevelWarn, "circuit breaker state changed", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceBreakerStateChange(ctx, pgtx.TraceBreakerStateChangeData{From: pgtx.BreakerClosed, To: pgtx.BreakerOpen})
		}},
		{pgtxslog.BreakerChanged, "breaker_changed", slog.LevelInfo, "circuit breaker state changed", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceBreakerStateChange(ctx, pgtx.TraceBreakerStateChangeData{From: pgtx.BreakerOpen, To: pgtx.BreakerHalfOpen})
		}},
		{pgtxslog.ContentionSwitched, "contention_switched", slog.LevelInfo, "contention limit changed", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceContention(ctx, pgtx.TraceContentionData{Limiting: true, Limit: 3})
		}},
		{pgtxslog.ContentionChanged, "contention_changed", slog.LevelDebug, "contention limit changed", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceContention(ctx, pgtx.TraceContentionData{Limiting: true, Limit: 4, Previous: 3})
		}},
		{pgtxslog.Committed, "committed", pgtxslog.LevelOff, "transaction committed", end(nil)},
		{pgtxslog.Attempt, "attempt", pgtxslog.LevelOff, "attempt finished", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Attempt: 1})
		}},
		{pgtxslog.CommitLost, "commit_lost", slog.LevelError, "commit lost", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceCommitLost(ctx, failover.CommitLostData{Xid: 730, Timeline: 1, NewTimeline: 2, Status: "aborted"})
		}},
		{pgtxslog.ReplicationAsync, "replication_async", slog.LevelWarn, "replication changed", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceReplication(ctx, failover.ReplicationData{Asynchronous: true, Standbys: 1})
		}},
		{pgtxslog.ReplicationChanged, "replication_changed", slog.LevelInfo, "replication changed", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceReplication(ctx, failover.ReplicationData{Standbys: 1, SynchronousStandbyNames: "*"})
		}},
		{pgtxslog.PoolerFound, "pooler_found", slog.LevelInfo, "pooler found", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TracePooler(ctx, pooler.Data{Name: "Pgpool-II", Version: "4.3.5"})
		}},
		{pgtxslog.PoolerSetting, "pooler_setting", slog.LevelWarn, "pooler setting", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TracePooler(ctx, pooler.Data{Name: "Pgpool-II", Advice: []pooler.Advice{{Setting: "failover_on_backend_error"}}})
		}},
		{pgtxslog.SlotRefused, "slot_refused", slog.LevelWarn, "connect refused for lack of slots", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceSlots(ctx, slots.Data{Event: slots.Refused, Limit: 3, Held: 3, Err: errOverload})
		}},
		{pgtxslog.SlotRaised, "slot_raised", slog.LevelInfo, "slot limit raised", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceSlots(ctx, slots.Data{Event: slots.Raised, Limit: 4, Held: 4})
		}},
		{pgtxslog.SlotWaited, "slot_waited", slog.LevelDebug, "waited for a held connection", func(ctx context.Context, tr *pgtxslog.Tracer) {
			tr.TraceSlots(ctx, slots.Data{Event: slots.Waited, Limit: 3, Held: 3, Wait: time.Millisecond})
		}},
	}
}

// TestDefaultLevels checks every kind's default level and message, and
// that the committed and attempt kinds are off.
func TestDefaultLevels(t *testing.T) {
	t.Parallel()
	for _, tt := range triggers() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.event.String(); got != tt.name {
				t.Errorf("String() = %q, want %q", got, tt.name)
			}
			h, tr := newRecorder(slog.LevelDebug, nil)
			tt.fire(context.Background(), tr)
			got := h.lines(t)
			if tt.level == pgtxslog.LevelOff {
				if len(got) != 0 {
					t.Errorf("got %v, want nothing: the kind is off by default", got)
				}
				return
			}
			if len(got) != 1 || got[0].level != tt.level || got[0].msg != tt.msg {
				t.Errorf("got %v, want one %v line %q", got, tt.level, tt.msg)
			}
		})
	}
}

// TestLevels checks that WithLevels sets the level of each kind, and
// that LevelOff silences it.
func TestLevels(t *testing.T) {
	t.Parallel()
	for _, tt := range triggers() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tests := []struct {
				level slog.Leveler
				want  int
			}{
				{slog.LevelError + 2, 1},
				{slog.LevelDebug - 4, 1},
				{pgtxslog.LevelOff, 0},
				{nil, 1}, // the default, unless off
			}
			for _, lt := range tests {
				h, tr := newRecorder(slog.LevelDebug-4, pgtxslog.WithLevels(levels{tt.event: lt.level}))
				tt.fire(context.Background(), tr)
				got := h.lines(t)
				want, level := lt.want, tt.level
				if lt.level != nil {
					level = lt.level.Level()
				}
				if level == pgtxslog.LevelOff {
					want = 0
				}
				if len(got) != want {
					t.Errorf("level %v: got %v, want %d lines", lt.level, got, want)
				} else if want == 1 && (got[0].level != level || got[0].msg != tt.msg) {
					t.Errorf("level %v: got %v %q, want %v %q", lt.level, got[0].level, got[0].msg, level, tt.msg)
				}
			}
		})
	}
}

// TestLevelsOnlyTheirKind checks that a level set for one kind leaves the
// others at their defaults, that an unknown kind is ignored, and that WithLevels
// copies the map.
func TestLevelsOnlyTheirKind(t *testing.T) {
	t.Parallel()
	m := levels{pgtxslog.RetryConflict: slog.LevelError, pgtxslog.Event(-1): slog.LevelError, pgtxslog.Event(99): slog.LevelError}
	h, tr := newRecorder(slog.LevelDebug, pgtxslog.WithLevels(m))
	m[pgtxslog.RetryOverload] = pgtxslog.LevelOff
	ctx := context.Background()
	for _, tt := range triggers() {
		tt.fire(ctx, tr)
	}
	got := h.lines(t)
	var want []slog.Level
	for _, tt := range triggers() {
		switch {
		case tt.event == pgtxslog.RetryConflict:
			want = append(want, slog.LevelError)
		case tt.level != pgtxslog.LevelOff:
			want = append(want, tt.level)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines %v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].level != want[i] {
			t.Errorf("line %d (%q): level %v, want %v", i, got[i].msg, got[i].level, want[i])
		}
	}
	if s := pgtxslog.Event(99).String(); s != "Event(99)" {
		t.Errorf("Event(99).String() = %q", s)
	}
}

func TestTraceContention(t *testing.T) {
	t.Parallel()
	contentionLine := func(level slog.Level, attrs map[string]string) line {
		return line{level, "contention limit changed", attrs}
	}
	tests := []logCase[pgtx.TraceContentionData]{
		{
			name: "starts limiting at info",
			data: pgtx.TraceContentionData{Label: "transfer", Limiting: true, Limit: 6, ConflictRatio: 0.25},
			want: []line{contentionLine(slog.LevelInfo, map[string]string{
				"label": "transfer", "limiting": "true", "limit": "6", "previous": "0", "conflict_ratio": "0.25",
			})},
		},
		{
			name: "changes its limit at debug",
			data: pgtx.TraceContentionData{Label: "transfer", Limiting: true, Limit: 9, Previous: 6, ConflictRatio: 0.125},
			want: []line{contentionLine(slog.LevelDebug, map[string]string{
				"label": "transfer", "limiting": "true", "limit": "9", "previous": "6", "conflict_ratio": "0.125",
			})},
		},
		{
			name: "stops limiting at info, without a label",
			data: pgtx.TraceContentionData{Previous: 9, ConflictRatio: 0.01},
			want: []line{contentionLine(slog.LevelInfo, map[string]string{
				"limiting": "false", "limit": "0", "previous": "9", "conflict_ratio": "0.01",
			})},
		},
		{
			name: "changes logged at info",
			opts: pgtxslog.WithLevels(levels{pgtxslog.ContentionChanged: slog.LevelInfo}),
			data: pgtx.TraceContentionData{Label: "transfer", Limiting: true, Limit: 3, Previous: 6},
			want: []line{contentionLine(slog.LevelInfo, map[string]string{
				"label": "transfer", "limiting": "true", "limit": "3", "previous": "6", "conflict_ratio": "0",
			})},
		},
		{
			name: "switches off",
			opts: pgtxslog.WithLevels(levels{pgtxslog.ContentionSwitched: pgtxslog.LevelOff}),
			data: pgtx.TraceContentionData{Label: "transfer", Limiting: true, Limit: 6},
		},
	}
	runLogCases(t, tests, (*pgtxslog.Tracer).TraceContention)
}

// TestAdmission checks that an attempt the contention gate limited carries
// its wait and the limit.
func TestAdmission(t *testing.T) {
	t.Parallel()
	h, tr := newRecorder(slog.LevelDebug, pgtxslog.WithLevels(levels{pgtxslog.Attempt: slog.LevelDebug}))
	ctx := context.Background()
	tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Label: "transfer", Isolation: pgtx.Serializable, Attempt: 1,
		Err: errConflict, Class: pgtx.ClassConflict, Duration: 2 * time.Millisecond, Retry: true,
		AdmissionWait: 7 * time.Millisecond, Limit: 4})
	tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Label: "transfer", Isolation: pgtx.Serializable, Attempt: 2,
		Duration: time.Millisecond, AdmissionWait: 3 * time.Millisecond, Limit: 4})
	assertLines(t, h,
		line{slog.LevelDebug, "retrying transaction", map[string]string{
			"label": "transfer", "isolation": "SERIALIZABLE", "attempt": "1", "class": "conflict", "sqlstate": "40001",
			"err": errText(errConflict), "backoff": "0s", "duration": "2ms", "admission_wait": "7ms", "limit": "4",
		}},
		line{slog.LevelDebug, "attempt finished", map[string]string{
			"label": "transfer", "isolation": "SERIALIZABLE", "attempt": "2", "duration": "1ms",
			"admission_wait": "3ms", "limit": "4",
		}},
	)
}

// TestJSONLines writes a scripted set of events through slog's JSON
// handler and checks each line as a log store receives it: the error at
// the top under "err", the rest in the group "pgtx", under the logger's
// own group when it has one.
func TestJSONLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	tr := pgtxslog.NewTracer(pgtxslog.WithLogger(logger))
	grouped := pgtxslog.NewTracer(pgtxslog.WithLogger(logger.WithGroup("db")))
	ctx := context.Background()
	tests := []struct {
		name string
		fire func()
		want string
	}{
		{"conflict retry", func() {
			tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Label: "transfer", Isolation: pgtx.Serializable, Attempt: 1,
				Err: errConflict, Class: pgtx.ClassConflict, Duration: 4 * time.Millisecond, Retry: true, Backoff: 3 * time.Millisecond})
		}, `{"level":"DEBUG","msg":"retrying transaction","err":"ERROR: boom (SQLSTATE 40001)","pgtx":{"label":"transfer","isolation":"SERIALIZABLE","attempt":1,"class":"conflict","sqlstate":"40001","backoff":3000000,"duration":4000000}}`},
		{"overload retry", func() {
			tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Isolation: pgtx.ReadCommitted, Attempt: 2,
				Err: errOverload, Class: pgtx.ClassOverload, Duration: time.Millisecond, Retry: true, Backoff: 250 * time.Millisecond})
		}, `{"level":"WARN","msg":"retrying transaction","err":"ERROR: boom (SQLSTATE 53300)","pgtx":{"isolation":"READ COMMITTED","attempt":2,"class":"overload","sqlstate":"53300","backoff":250000000,"duration":1000000}}`},
		{"cancel", func() {
			tr.TraceCancel(ctx, pgtx.TraceCancelData{PID: 4242, Mode: pgtx.CancelModePool, Latency: 800 * time.Microsecond})
		}, `{"level":"DEBUG","msg":"statement cancelled","pgtx":{"pid":4242,"cancel_mode":"pool","cancel_outcome":"signalled","fell_back":false,"latency":800000}}`},
		{"cancel fallback", func() {
			tr.TraceCancel(ctx, pgtx.TraceCancelData{PID: 4242, Mode: pgtx.CancelModePool, FellBack: true, Latency: time.Millisecond})
		}, `{"level":"WARN","msg":"statement cancelled","pgtx":{"pid":4242,"cancel_mode":"pool","cancel_outcome":"protocol","fell_back":true,"latency":1000000}}`},
		{"ambiguous commit", func() {
			tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Label: "pay", Isolation: pgtx.ReadCommitted, Attempts: 1,
				Err: errCommitLost, Class: pgtx.Classify(errCommitLost), Duration: 1500 * time.Millisecond})
		}, `{"level":"ERROR","msg":"commit outcome unknown","err":"` + errCommitLost.Error() + `","pgtx":{"label":"pay","isolation":"READ COMMITTED","attempts":1,"class":"ambiguous","duration":1500000000}}`},
		{"budget refusal", func() {
			tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Label: "pay", Isolation: pgtx.ReadCommitted, Attempt: 2, Err: errBudget, Class: pgtx.ClassOverload})
		}, `{"level":"WARN","msg":"retry budget exhausted","err":"` + errBudget.Error() + `","pgtx":{"label":"pay","isolation":"READ COMMITTED","attempt":2,"class":"overload","sqlstate":"53300"}}`},
		{"breaker opening", func() {
			tr.TraceBreakerStateChange(ctx, pgtx.TraceBreakerStateChangeData{Name: "main", From: pgtx.BreakerClosed, To: pgtx.BreakerOpen,
				Reason: "5 consecutive failures", Calls: 5, Failures: 5})
		}, `{"level":"WARN","msg":"circuit breaker state changed","pgtx":{"breaker":"main","from":"closed","to":"open","reason":"5 consecutive failures","calls":5,"failures":5,"slow":0}}`},
		{"contention change", func() {
			tr.TraceContention(ctx, pgtx.TraceContentionData{Label: "transfer", Limiting: true, Limit: 6, Previous: 4, ConflictRatio: 0.5})
		}, `{"level":"DEBUG","msg":"contention limit changed","pgtx":{"label":"transfer","limiting":true,"limit":6,"previous":4,"conflict_ratio":0.5}}`},
		{"under the logger's group", func() {
			grouped.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Isolation: pgtx.Serializable, Attempt: 1, Err: errConnLost, Class: pgtx.ClassConnectionLost, Retry: true})
		}, `{"level":"WARN","msg":"retrying transaction","db":{"err":"ERROR: boom (SQLSTATE 57P01)","pgtx":{"isolation":"SERIALIZABLE","attempt":1,"class":"connection_lost","sqlstate":"57P01","backoff":0,"duration":0}}}`},
	}
	for _, tt := range tests {
		buf.Reset()
		tt.fire()
		if got := strings.TrimSuffix(buf.String(), "\n"); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}
