package cancel

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fakeNode answers a cancel request sent straight to it: acked closes the
// connection once the request is read, silent reads and never closes.
type fakeNode struct {
	answer protocolAnswer
	got    chan []byte // the requests received
}

func (n *fakeNode) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if n.answer == refused || addr != "10.0.0.2:5433" {
		return nil, errors.New("dial tcp: connection refused")
	}
	client, server := net.Pipe()
	go func() {
		defer server.Close()
		buf := make([]byte, 16)
		if _, err := io.ReadFull(server, buf); err != nil {
			return
		}
		n.got <- buf
		if n.answer == cutShort {
			_, _ = io.Copy(io.Discard, server) // until the client gives up
		}
	}()
	return client, nil
}

// TestCancelPastThePooler: behind Pgpool-II, when the primary's backend
// runs nothing (the statement runs on the session's load-balancing node),
// and the connection's pid and key are that node's backend's, the
// connection's own cancel request goes straight to that node:
// acknowledged, the cancel is confirmed at once and the connection kept,
// Pgpool-II never asked (it would forward the request to each node a
// second apart). When the node cannot be reached or does not acknowledge,
// the request goes through Pgpool-II.
func TestCancelPastThePooler(t *testing.T) {
	for _, tt := range []struct {
		name     string
		node     protocolAnswer
		requests int32 // through the pooler
	}{
		{"acknowledged", acked, 0},
		{"unreachable", refused, 1},
		{"never acknowledged", cutShort, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node := &fakeNode{answer: tt.node, got: make(chan []byte, 1)}
			// The cancel's context is the real clock's: a node that never
			// acknowledges is given up after a share of the grace.
			hs := newHarness(t, Settings{Mode: ModePool, Grace: 200 * time.Millisecond, Dial: node.dial}, 0,
				poolAnswer{visible: true, ours: true}, acked)
			hs.h.SetTarget(Target{PID: 999, Start: 7, WhileActive: true, Standby: &Standby{Addr: "10.0.0.2:5433", PID: 4242, Start: 8, OwnKey: true}})
			hs.h.SetReady()
			got := hs.cancel(t, 0)
			if got.Outcome != Protocol || !got.FellBack {
				t.Errorf("reported %+v, want a protocol cancel after the pool's", got)
			}
			if n := hs.conn.requests.Load(); n != tt.requests {
				t.Errorf("%d cancel requests through the pooler, want %d", n, tt.requests)
			}
			if tt.node != refused {
				req := <-node.got
				if binary.BigEndian.Uint32(req[4:8]) != cancelRequestCode || binary.BigEndian.Uint32(req[8:12]) != 4242 ||
					binary.BigEndian.Uint32(req[12:16]) != 7 {
					t.Errorf("the node received %x, want a cancel request for pid 4242 with key 7", req)
				}
			}
			if hs.h.Doomed() || hs.conn.closed.Load() {
				t.Error("the connection was not kept")
			}
		})
	}
}

// TestCancelOnTheStandbysServer: behind Pgpool-II, when the primary's
// backend runs nothing and the connection's key is not the standby
// backend's, the cancel query runs on a connection of its own to the
// standby's server: signalled or gone, the cancel is confirmed and the
// connection kept; not sent (no connection), the request goes through
// Pgpool-II; sent with its answer lost, the signal may still arrive, so
// the connection is closed.
func TestCancelOnTheStandbysServer(t *testing.T) {
	for _, tt := range []struct {
		name     string
		answer   Answer
		err      error
		want     Outcome
		requests int32 // through the pooler
		kept     bool
	}{
		{"signalled", Answer{Visible: true, Ours: true, Signalled: true}, nil, Signalled, 0, true},
		{"gone", Answer{}, pgx.ErrNoRows, NotFound, 0, true},
		{"no connection", Answer{}, &pgconn.ConnectError{}, Protocol, 1, true},
		{"the answer lost", Answer{}, errors.New("read tcp: connection reset by peer"), Closed, 1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var asked Target
			var addr string
			node := func(_ context.Context, a string, target Target) (Answer, error) {
				addr, asked = a, target
				return tt.answer, tt.err
			}
			hs := newHarness(t, Settings{Mode: ModePool, Grace: time.Second, Node: node}, live,
				poolAnswer{visible: true, ours: true}, acked)
			hs.h.SetTarget(Target{PID: 999, Start: 7, WhileActive: true, Standby: &Standby{Addr: "10.0.0.2:5433", PID: 1234, Start: 8}})
			hs.h.SetReady()
			got := hs.cancel(t, 0)
			if got.Outcome != tt.want || !got.FellBack {
				t.Errorf("reported %+v, want %v after the pool's", got, tt.want)
			}
			if addr != "10.0.0.2:5433" || asked != (Target{PID: 1234, Start: 8}) {
				t.Errorf("the cancel query went to %q for %+v, want the standby's backend on its server", addr, asked)
			}
			if n := hs.conn.requests.Load(); n != tt.requests {
				t.Errorf("%d cancel requests through the pooler, want %d", n, tt.requests)
			}
			if kept := !hs.h.Doomed() && !hs.conn.closed.Load(); kept != tt.kept {
				t.Errorf("connection kept %v, want %v", kept, tt.kept)
			}
		})
	}
}
