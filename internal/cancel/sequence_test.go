package cancel

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnhealthyPoolSkipped: after the server refused the cancel query, the
// cancel pool is skipped for poolUnhealthyFor (the protocol cancel goes at
// once, no pool error counted again), then tried again; the connection's
// handler serves every cancel in turn.
func TestUnhealthyPoolSkipped(t *testing.T) {
	refused := &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "42501"}
	hs := newHarness(t, Settings{Mode: ModePool, Grace: 2 * time.Second}, live, poolAnswer{err: refused}, acked)
	hs.h.SetTarget(Target{PID: 4242, Start: 1})
	hs.h.SetReady()

	steps := []struct {
		name    string
		before  time.Duration // the clock moves this much first
		answer  poolAnswer
		want    Result
		queries int32
		counts  Counts
	}{
		{
			name: "refused: protocol cancel", answer: poolAnswer{err: refused},
			want:    Result{PID: 4242, Outcome: Protocol, FellBack: true, Latency: queryTakes + protocolTakes},
			queries: 1, counts: Counts{Sent: 1, PoolErrors: 1, Protocol: 1},
		},
		{
			name: "skipped while unhealthy", before: poolUnhealthyFor / 2, answer: poolAnswer{visible: true, signalled: true},
			want:    Result{PID: 4242, Outcome: Protocol, FellBack: true, Latency: protocolTakes},
			queries: 1, counts: Counts{Sent: 2, PoolErrors: 1, Protocol: 2},
		},
		{
			name: "tried again once healthy", before: poolUnhealthyFor, answer: poolAnswer{visible: true, signalled: true},
			want:    Result{PID: 4242, Outcome: Signalled, Latency: queryTakes},
			queries: 2, counts: Counts{Sent: 3, PoolErrors: 1, Protocol: 2, Signalled: 1},
		},
	}
	for _, st := range steps {
		hs.clk.advance(st.before)
		hs.pool.answer = st.answer
		if got := hs.cancel(t, 0); got != st.want {
			t.Errorf("%s: reported %+v, want %+v", st.name, got, st.want)
		}
		if n := hs.pool.queries.Load(); n != st.queries {
			t.Errorf("%s: %d cancel pool queries, want %d", st.name, n, st.queries)
		}
		if n := hs.c.Counts(); n != st.counts {
			t.Errorf("%s: counts %+v, want %+v", st.name, n, st.counts)
		}
		if hs.h.Doomed() || hs.conn.closed.Load() || !hs.socket.last().IsZero() {
			t.Errorf("%s: the connection was not kept", st.name)
		}
	}
}
