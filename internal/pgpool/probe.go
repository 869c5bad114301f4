package pgpool

import (
	"context"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Backend names a server process: its pid and its start (unix
// microseconds), which together outlive the reuse of a pid.
type Backend struct {
	PID   uint32
	Start int64
}

// Probe is what a connection's backends said of themselves when it was
// made.
type Probe struct {
	// OK: both answered; the rest is valid only then.
	OK bool
	// Balanced answered a query of stable functions only, which
	// Pgpool-II sends to the session's load-balancing node; Primary one
	// with a volatile function, which it sends to the primary. On a direct
	// connection both are the connection's own backend.
	Balanced, Primary Backend
}

// balancedSQL reads the pid and the start (unix microseconds) of the
// backend that answers it, from pg_stat_get_activity, the function under
// pg_stat_activity, which a new backend answers fastest. Its functions are
// stable: Pgpool-II sends it to the session's load-balancing node.
// primarySQL is the same with a volatile function, which Pgpool-II sends
// to the primary.
const (
	balancedSQL = "select pid, round(extract(epoch from backend_start) * 1000000)::int8 from pg_stat_get_activity(pg_backend_pid())"
	primarySQL  = "select pid, round(extract(epoch from backend_start) * 1000000)::int8, clock_timestamp() from pg_stat_get_activity(pg_backend_pid())"
)

// IsProbe reports that sql is one of the queries [Identify] sends.
func IsProbe(sql string) bool { return sql == balancedSQL || sql == primarySQL }

// Identify asks, in one round trip, which backend answers a query that
// Pgpool-II would balance and which one answers a query it would send to
// the primary. A server error (a server without pg_stat_get_activity as
// PostgreSQL has it) leaves p.OK false; any other error is the
// connection's.
func Identify(ctx context.Context, pgConn *pgconn.PgConn) (p Probe, err error) {
	res, err := simple(ctx, pgConn, balancedSQL, primarySQL)
	if err != nil {
		return p, err
	}
	var ok1, ok2 bool
	p.Balanced, ok1 = backendOf(res[0])
	p.Primary, ok2 = backendOf(res[1])
	p.OK = ok1 && ok2
	return p, nil
}

// Pooled reports that something in front of the server answers the
// connection whose pid (its cancel key's) is pid: a backend other than the
// connection's answered one of the probe's queries. Pgpool-II gives its
// clients the pid of its last node's backend.
func (p Probe) Pooled(pid uint32) bool {
	return p.OK && (p.Balanced.PID != pid || p.Primary.PID != pid)
}

// backendOf parses an identity row (pid, start), in text.
func backendOf(r result) (Backend, bool) {
	if r.err != nil || len(r.rows) != 1 || len(r.rows[0]) < 2 {
		return Backend{}, false
	}
	pid, err := strconv.ParseUint(r.rows[0][0], 10, 32)
	if err != nil {
		return Backend{}, false
	}
	start, err := strconv.ParseInt(r.rows[0][1], 10, 64)
	if err != nil {
		return Backend{}, false
	}
	return Backend{PID: uint32(pid), Start: start}, true
}

// BalancedNode returns the address (host:port) of the node Pgpool-II
// balances pgConn's session to, from its SHOW POOL_NODES, which Pgpool-II
// answers itself; "" when it names none, or one it reaches over a Unix
// socket.
func BalancedNode(ctx context.Context, pgConn *pgconn.PgConn) (string, error) {
	res, err := simple(ctx, pgConn, "show pool_nodes")
	if err != nil || res[0].err != nil || len(res[0].cols) == 0 {
		return "", err
	}
	host, port, lb := -1, -1, -1
	for i, c := range res[0].cols {
		switch c {
		case "hostname":
			host = i
		case "port":
			port = i
		case "load_balance_node":
			lb = i
		}
	}
	if host < 0 || port < 0 || lb < 0 {
		return "", nil
	}
	for _, row := range res[0].rows {
		if len(row) > max(host, port, lb) && row[lb] == "true" && !strings.HasPrefix(row[host], "/") {
			return net.JoinHostPort(row[host], row[port]), nil
		}
	}
	return "", nil
}
