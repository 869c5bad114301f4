package pgtxslog_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/slots"
)

// TestTraceSlots: a connect refused for lack of slots is a Warn line
// with the refusal under "err", the pool (main or cancel), its limit and
// what it held; a raised limit is an Info line; a wait for a held
// connection a Debug line with its wait; an event this package does not
// know is not logged.
func TestTraceSlots(t *testing.T) {
	t.Parallel()
	refusal := &pgconn.PgError{Severity: "FATAL", Code: "53300", Message: "sorry, too many clients already"}
	tests := []logCase[slots.Data]{
		{
			name: "refused, main pool",
			data: slots.Data{Event: slots.Refused, Limit: 3, Held: 3, Err: refusal},
			want: []line{{slog.LevelWarn, "connect refused for lack of slots", map[string]string{
				"err": refusal.Error(), "cancel_pool": "false", "limit": "3", "held": "3"}}},
		},
		{
			name: "refused, cancel pool holding nothing",
			data: slots.Data{Event: slots.Refused, CancelPool: true, Limit: 1, Held: 0, Err: refusal},
			want: []line{{slog.LevelWarn, "connect refused for lack of slots", map[string]string{
				"err": refusal.Error(), "cancel_pool": "true", "limit": "1", "held": "0"}}},
		},
		{
			name: "raised",
			data: slots.Data{Event: slots.Raised, Limit: 4, Held: 4},
			want: []line{{slog.LevelInfo, "slot limit raised", map[string]string{
				"cancel_pool": "false", "limit": "4", "held": "4"}}},
		},
		{
			name: "waited",
			data: slots.Data{Event: slots.Waited, Limit: 3, Held: 3, Wait: 12 * time.Millisecond},
			want: []line{{slog.LevelDebug, "waited for a held connection", map[string]string{
				"cancel_pool": "false", "limit": "3", "held": "3", "wait": "12ms"}}},
		},
		{
			name: "unknown event",
			data: slots.Data{Event: slots.Event(99), Err: errors.New("x")},
		},
		{
			name: "zero event",
			data: slots.Data{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, tr := newRecorder(slog.LevelDebug, tt.opts)
			tr.TraceSlots(context.Background(), tt.data)
			assertLines(t, h, tt.want...)
		})
	}
}
