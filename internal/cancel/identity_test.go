package cancel

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/cancelquery"
)

// fakeRow scans a pid and a start time, or fails with err.
type fakeRow struct {
	pid   uint32
	start time.Time
	err   error
}

func (r fakeRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	*dest[0].(*uint32) = r.pid
	*dest[1].(*time.Time) = r.start
	return nil
}

// fakeQuerier answers the identity query with its row.
type fakeQuerier struct {
	row     fakeRow
	closed  bool
	queries []string
	modes   []any
}

func (q *fakeQuerier) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	q.queries = append(q.queries, sql)
	q.modes = append(q.modes, args...)
	return q.row
}

func (q *fakeQuerier) IsClosed() bool { return q.closed }

// TestCapture: the backend's identity is captured in ModePool only; a
// connection whose pid differs from its backend's is not direct; a server
// that cannot tell the identity leaves the protocol cancel; a connection
// that failed is an error.
func TestCapture(t *testing.T) {
	start := time.Date(2025, 5, 1, 12, 0, 0, 123456000, time.UTC)
	fatal := &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}
	undefined := &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "42P01"}
	tests := []struct {
		name       string
		mode       Mode
		row        fakeRow
		closed     bool
		wantQuery  bool
		wantDirect bool
		wantStart  int64
		wantErr    bool
	}{
		{"direct", ModePool, fakeRow{pid: 4242, start: start}, false, true, true, start.UnixMicro(), false},
		{"behind a pooler", ModePool, fakeRow{pid: 77, start: start}, false, true, false, start.UnixMicro(), false},
		{"no row", ModePool, fakeRow{err: pgx.ErrNoRows}, false, true, false, 0, false},
		{"no pg_stat_activity", ModePool, fakeRow{err: undefined}, false, true, false, 0, false},
		{"a server error that closed the connection", ModePool, fakeRow{err: undefined}, true, true, false, 0, true},
		{"the session ended", ModePool, fakeRow{err: fatal}, false, true, false, 0, true},
		{"the connection broke", ModePool, fakeRow{err: errors.New("read tcp: connection reset by peer")}, false, true, false, 0, true},
		{"protocol mode asks nothing", ModeProtocol, fakeRow{pid: 4242, start: start}, false, false, false, 0, false},
		{"close mode asks nothing", ModeClose, fakeRow{pid: 4242, start: start}, false, false, false, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := newHarness(t, Settings{Mode: tt.mode, Grace: time.Second}, live, poolAnswer{}, acked)
			q := &fakeQuerier{row: tt.row, closed: tt.closed}
			err := hs.h.Capture(context.Background(), q)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Capture = %v, want an error: %v", err, tt.wantErr)
			}
			if tt.wantErr && !errors.Is(err, tt.row.err) {
				t.Errorf("Capture = %v, want it to wrap %v", err, tt.row.err)
			}
			if asked := len(q.queries) > 0; asked != tt.wantQuery {
				t.Fatalf("asked %v, want %v", q.queries, tt.wantQuery)
			}
			if tt.wantQuery && (q.queries[0] != cancelquery.Identity || len(q.modes) != 1 || q.modes[0] != pgx.QueryExecModeSimpleProtocol) {
				t.Errorf("asked %q with %v, want the identity query in the simple protocol", q.queries[0], q.modes)
			}
			if d, s := hs.h.direct.Load(), hs.h.backendStart.Load(); d != tt.wantDirect || s != tt.wantStart {
				t.Errorf("direct %v, backend start %d; want %v, %d", d, s, tt.wantDirect, tt.wantStart)
			}
		})
	}
}
