package cancel

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// safeErr is an error pgconn.SafeToRetry accepts: nothing was sent.
type safeErr struct{}

func (safeErr) Error() string     { return "dial tcp: connection refused" }
func (safeErr) SafeToRetry() bool { return true }

// What the socket's deadline is left at once the statement has returned.
type socketEnd int

const (
	// kept: cleared, the connection is used again.
	kept socketEnd = iota
	// closing: a moment from now, to write the Terminate of the close.
	closing
	// doomedAt: the context's end, so pgconn closes the connection.
	doomedAt
)

// TestHandler runs one cancellation per row, through every way it ends:
// which cancel is sent (pool, protocol, both, none), whether it is
// confirmed, whether the statement returned within the grace, and so
// whether the connection is kept, closed or doomed, what is counted and
// what is reported.
func TestHandler(t *testing.T) {
	const grace = 2 * time.Second
	refusedByServer := &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "42501", Message: "permission denied to cancel query"}
	cancelledByTimeout := &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "57014"}
	sessionEnded := &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}
	tests := []struct {
		name        string
		mode        Mode
		grace       time.Duration
		notReady    bool
		indirect    bool // behind a pooler: the backend pid is not the connection's
		whileActive bool // behind Pgpool-II: the target is signalled only while active
		offset      time.Duration
		pool        poolAnswer
		protocol    protocolAnswer
		returnAfter time.Duration

		want      Result // PID left out: always the connection's
		socket    socketEnd
		counts    Counts
		requests  int32 // protocol cancel requests
		queries   int32 // cancel pool queries
		unhealthy bool
	}{
		{
			name: "close mode closes at once", mode: ModeClose, grace: grace, offset: live, returnAfter: 5 * time.Millisecond,
			want: Result{Outcome: Closed, Latency: 5 * time.Millisecond}, socket: doomedAt, counts: Counts{Closed: 1},
		},
		{
			name: "a connection not set up yet is closed at once", mode: ModePool, grace: grace, notReady: true, offset: live,
			returnAfter: 5 * time.Millisecond,
			want:        Result{Outcome: Closed, Latency: 5 * time.Millisecond}, socket: doomedAt, counts: Counts{Closed: 1},
		},
		{
			name: "the cancel pool signals the backend", mode: ModePool, grace: grace, offset: live,
			pool: poolAnswer{visible: true, signalled: true},
			want: Result{Outcome: Signalled, Latency: queryTakes}, socket: kept,
			counts: Counts{Sent: 1, Signalled: 1}, queries: 1,
		},
		{
			name: "no backend has the pid", mode: ModePool, grace: grace, offset: live,
			pool: poolAnswer{err: pgx.ErrNoRows},
			want: Result{Outcome: NotFound, Latency: queryTakes}, socket: kept,
			counts: Counts{Sent: 1, NotFound: 1}, queries: 1,
		},
		{
			name: "the pid was recycled: the stranger is not signalled", mode: ModePool, grace: grace, offset: live,
			pool: poolAnswer{visible: true, signalled: false},
			want: Result{Outcome: NotFound, Latency: queryTakes}, socket: kept,
			counts: Counts{Sent: 1, NotFound: 1}, queries: 1,
		},
		{
			name: "the cancel role cannot see the identity: protocol cancel", mode: ModePool, grace: grace, offset: live,
			pool: poolAnswer{visible: false},
			want: Result{Outcome: Protocol, FellBack: true, Latency: queryTakes + protocolTakes}, socket: kept,
			counts: Counts{Sent: 1, Protocol: 1}, queries: 1, requests: 1,
		},
		{
			// Not a pool busy past the share of the grace: the next cancels
			// skip it for a while instead of each paying a failed connect.
			name: "the cancel pool cannot connect: unhealthy, protocol cancel", mode: ModePool, grace: grace, offset: live,
			pool: poolAnswer{acquireErr: errors.New("dial tcp: connection refused")},
			want: Result{Outcome: Protocol, FellBack: true, Latency: protocolTakes}, socket: kept,
			counts: Counts{Sent: 1, PoolErrors: 1, Protocol: 1}, requests: 1, unhealthy: true,
		},
		{
			name: "the cancel pool is busy past its share of the default grace: not unhealthy", mode: ModePool, grace: 0, offset: live,
			pool: poolAnswer{busy: true},
			want: Result{Outcome: Protocol, FellBack: true, Latency: protocolTakes}, socket: kept,
			counts: Counts{Sent: 1, PoolErrors: 1, Protocol: 1}, requests: 1,
		},
		{
			name: "the server refuses the cancel query: unhealthy, protocol cancel", mode: ModePool, grace: grace, offset: live,
			pool: poolAnswer{err: refusedByServer},
			want: Result{Outcome: Protocol, FellBack: true, Latency: queryTakes + protocolTakes}, socket: kept,
			counts: Counts{Sent: 1, PoolErrors: 1, Protocol: 1}, queries: 1, requests: 1, unhealthy: true,
		},
		{
			name: "the cancel query was not sent: protocol cancel", mode: ModePool, grace: grace, offset: live,
			pool: poolAnswer{err: safeErr{}},
			want: Result{Outcome: Protocol, FellBack: true, Latency: queryTakes + protocolTakes}, socket: kept,
			counts: Counts{Sent: 1, PoolErrors: 1, Protocol: 1}, queries: 1, requests: 1,
		},
		{
			name: "the cancel query was cancelled itself: the signal is unknown, closed", mode: ModePool, grace: grace, offset: live,
			pool: poolAnswer{err: cancelledByTimeout},
			want: Result{Outcome: Closed, FellBack: true, Latency: queryTakes + protocolTakes}, socket: closing,
			counts: Counts{Sent: 1, PoolErrors: 1, Closed: 1}, queries: 1, requests: 1, unhealthy: true,
		},
		{
			name: "the cancel pool's session ended mid-query: the signal is unknown, closed", mode: ModePool, grace: grace, offset: live,
			pool: poolAnswer{err: sessionEnded},
			want: Result{Outcome: Closed, FellBack: true, Latency: queryTakes + protocolTakes}, socket: closing,
			counts: Counts{Sent: 1, PoolErrors: 1, Closed: 1}, queries: 1, requests: 1, unhealthy: true,
		},
		{
			name: "the cancel query's answer was lost: unhealthy, protocol cancel all the same, closed", mode: ModePool, grace: grace, offset: live,
			pool: poolAnswer{err: errors.New("read tcp: connection reset by peer")},
			want: Result{Outcome: Closed, FellBack: true, Latency: queryTakes + protocolTakes}, socket: closing,
			counts: Counts{Sent: 1, PoolErrors: 1, Closed: 1}, queries: 1, requests: 1, unhealthy: true,
		},
		{
			name: "the cancel query's answer did not come within the grace: doomed", mode: ModePool, grace: grace, offset: expired,
			pool: poolAnswer{lost: true}, returnAfter: grace + time.Millisecond,
			want: Result{Outcome: Closed, FellBack: true, Latency: queryTakes}, socket: doomedAt,
			counts: Counts{Sent: 1, PoolErrors: 1, Closed: 1}, queries: 1,
		},
		{
			name: "behind Pgpool-II the primary's backend runs the statement: signalled", mode: ModePool, grace: grace, offset: live,
			whileActive: true, pool: poolAnswer{visible: true, ours: true, signalled: true},
			want: Result{Outcome: Signalled, Latency: queryTakes}, socket: kept,
			counts: Counts{Sent: 1, Signalled: 1}, queries: 1,
		},
		{
			// Its statement runs on a standby's backend, which the cancel
			// pool cannot reach; the protocol cancel reaches every backend
			// of the session.
			name: "behind Pgpool-II the primary's backend is idle: protocol cancel", mode: ModePool, grace: grace, offset: live,
			whileActive: true, pool: poolAnswer{visible: true, ours: true},
			want: Result{Outcome: Protocol, FellBack: true, Latency: queryTakes + protocolTakes}, socket: kept,
			counts: Counts{Sent: 1, Protocol: 1}, queries: 1, requests: 1,
		},
		{
			name: "behind Pgpool-II a recycled pid: not signalled", mode: ModePool, grace: grace, offset: live,
			whileActive: true, pool: poolAnswer{visible: true},
			want: Result{Outcome: NotFound, Latency: queryTakes}, socket: kept,
			counts: Counts{Sent: 1, NotFound: 1}, queries: 1,
		},
		{
			name: "behind a pooler the protocol cancel goes first", mode: ModePool, grace: grace, indirect: true, offset: live,
			want: Result{Outcome: Protocol, Latency: protocolTakes}, socket: kept,
			counts: Counts{Sent: 1, Protocol: 1}, requests: 1,
		},
		{
			name: "protocol mode: acknowledged", mode: ModeProtocol, grace: grace, offset: live,
			want: Result{Outcome: Protocol, Latency: protocolTakes}, socket: kept,
			counts: Counts{Sent: 1, Protocol: 1}, requests: 1,
		},
		{
			name: "protocol mode: the request could not be sent, closed", mode: ModeProtocol, grace: grace, offset: live, protocol: refused,
			want: Result{Outcome: Closed, Latency: protocolTakes}, socket: closing,
			counts: Counts{Sent: 1, Closed: 1}, requests: 1,
		},
		{
			name: "protocol mode: the acknowledgement's wait was cut short, closed", mode: ModeProtocol, grace: grace, offset: expired, protocol: cutShort,
			want: Result{Outcome: Closed, Latency: protocolTakes}, socket: closing,
			counts: Counts{Sent: 1, Closed: 1}, requests: 1,
		},
		{
			name: "a confirmed cancel of a statement that returned after the grace: doomed", mode: ModeProtocol, grace: grace, offset: live,
			returnAfter: grace,
			want:        Result{Outcome: Closed, Latency: protocolTakes}, socket: doomedAt,
			counts: Counts{Sent: 1, Protocol: 1, Closed: 1}, requests: 1,
		},
		{
			name: "the grace off: a statement returning late keeps its connection", mode: ModeProtocol, grace: 0, offset: live,
			returnAfter: time.Hour,
			want:        Result{Outcome: Protocol, Latency: protocolTakes}, socket: kept,
			counts: Counts{Sent: 1, Protocol: 1}, requests: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Settings{Mode: tt.mode, Grace: tt.grace, DefaultGrace: 4} // a share of 1ns: a busy pool is given up at once
			hs := newHarness(t, s, tt.offset, tt.pool, tt.protocol)
			if !tt.indirect {
				hs.h.SetTarget(Target{PID: 4242, Start: 1_700_000_000_000_000, WhileActive: tt.whileActive})
			}
			if !tt.notReady {
				hs.h.SetReady()
			}
			got := hs.cancel(t, tt.returnAfter)

			want := tt.want
			want.PID = 4242
			if got != want {
				t.Errorf("reported %+v, want %+v", got, want)
			}
			if n := hs.c.Counts(); n != tt.counts {
				t.Errorf("counts %+v, want %+v", n, tt.counts)
			}
			if l := hs.c.Latency(); l.Count != 1 || l.Duration != want.Latency || l.Max != want.Latency {
				t.Errorf("latency %+v, want the one cancellation's %v", l, want.Latency)
			}
			if n := hs.conn.requests.Load(); n != tt.requests {
				t.Errorf("%d protocol cancel requests, want %d", n, tt.requests)
			}
			if n := hs.pool.queries.Load(); n != tt.queries {
				t.Errorf("%d cancel pool queries, want %d", n, tt.queries)
			}
			if n, acq := hs.pool.released.Load(), hs.pool.acquires.Load(); tt.queries > 0 && n != 1 || acq > 0 && tt.queries == 0 && n != 0 {
				t.Errorf("%d cancel pool connections released after %d acquires and %d queries", n, acq, tt.queries)
			}
			if tt.queries > 0 && (hs.pool.pid.Load() != 4242 || hs.pool.start.Load() != 1_700_000_000_000_000 || hs.pool.whileActive.Load() != tt.whileActive) {
				t.Errorf("the cancel query named backend %d started at %d (while active: %v)", hs.pool.pid.Load(), hs.pool.start.Load(), hs.pool.whileActive.Load())
			}
			if u := hs.c.clock.Now().UnixNano() < hs.c.unhealthyUntil.Load(); u != tt.unhealthy {
				t.Errorf("cancel pool unhealthy = %v, want %v", u, tt.unhealthy)
			}
			checkSocket(t, hs, tt.mode, tt.grace, tt.notReady, tt.socket)
		})
	}
}

// checkSocket checks the socket's deadlines: the one HandleCancel armed,
// and where the connection was left.
func checkSocket(t *testing.T, hs *harness, mode Mode, grace time.Duration, notReady bool, end socketEnd) {
	t.Helper()
	began := hs.h.began
	armed := time.Time{}
	switch {
	case mode == ModeClose || notReady:
		armed = began
	case grace > 0:
		armed = began.Add(grace)
	}
	if len(hs.socket.deadlines) != 2 {
		t.Fatalf("socket deadlines %v, want one armed and one left", hs.socket.deadlines)
	}
	if got := hs.socket.deadlines[0]; !got.Equal(armed) {
		t.Errorf("armed the socket's deadline at %v, want %v", got, armed)
	}
	last := hs.socket.last()
	switch end {
	case kept:
		if !last.IsZero() || hs.conn.closed.Load() || hs.h.Doomed() {
			t.Errorf("connection not kept: deadline %v, closed %v, doomed %v", last, hs.conn.closed.Load(), hs.h.Doomed())
		}
	case closing:
		if want := hs.clk.Now().Add(DestroyWriteTimeout); !last.Equal(want) || !hs.conn.closed.Load() || hs.h.Doomed() {
			t.Errorf("connection not closed now: deadline %v (want %v), closed %v, doomed %v", last, want, hs.conn.closed.Load(), hs.h.Doomed())
		}
	case doomedAt:
		if !last.Equal(began) || hs.conn.closed.Load() || !hs.h.Doomed() {
			t.Errorf("connection not doomed: deadline %v (want %v), closed %v, doomed %v", last, began, hs.conn.closed.Load(), hs.h.Doomed())
		}
	}
}
