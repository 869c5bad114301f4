package pgpool

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// Info is what a Pgpool-II said of itself.
type Info struct {
	// Version is its SHOW POOL_VERSION, such as "4.3.5 (tamahomeboshi)".
	Version string
	// Settings are its settings as PGPOOL SHOW ALL lists them, name to
	// value.
	Settings map[string]string
}

// Verdict is a pool's knowledge of what is in front of its server, found
// on the first connection that needs it and kept for the pool's life. Its
// zero value knows nothing yet. It is safe for concurrent use.
type Verdict struct {
	mu     sync.Mutex
	known  bool
	pgpool bool
	info   Info
	// Found, when set, is told once what was found when it is Pgpool-II,
	// with the context of the connect that found it.
	Found func(context.Context, Info)
}

// Pgpool reports that the pool's server is known to be behind Pgpool-II.
func (v *Verdict) Pgpool() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.pgpool
}

// BalancesStatements reports that the pool's Pgpool-II may send each
// statement of a session to another node ([Info.BalancesStatements]).
func (v *Verdict) BalancesStatements() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.pgpool && v.info.BalancesStatements()
}

// Decide tells whether the pooled connection pgConn (one [Probe.Pooled]
// says something answers in front of its server) goes through Pgpool-II:
// the first time, by asking what answers SHOW POOL_VERSION (Pgpool-II
// answers it itself; PostgreSQL, and a pooler that passes it on, refuse
// it) and, when Pgpool-II did, its settings; afterwards from what the
// first answer found. A server error leaves the session alive and says
// "not Pgpool-II"; any other error is the connection's, and the question
// is asked again on the next connection.
func (v *Verdict) Decide(ctx context.Context, pgConn *pgconn.PgConn) (bool, error) {
	v.mu.Lock()
	known, pgpool := v.known, v.pgpool
	v.mu.Unlock()
	if known {
		return pgpool, nil
	}
	info, pgpool, err := ask(ctx, pgConn)
	if err != nil {
		return false, err
	}
	v.mu.Lock()
	first := !v.known
	if first {
		v.known, v.pgpool, v.info = true, pgpool, info
	}
	pgpool = v.pgpool
	v.mu.Unlock()
	if first && pgpool && v.Found != nil {
		v.Found(ctx, info)
	}
	return pgpool, nil
}

// ask asks pgConn's server whether it is Pgpool-II, and its settings.
func ask(ctx context.Context, pgConn *pgconn.PgConn) (Info, bool, error) {
	res, err := simple(ctx, pgConn, "show pool_version")
	if err != nil {
		return Info{}, false, err
	}
	if res[0].err != nil || len(res[0].rows) != 1 || len(res[0].rows[0]) != 1 {
		return Info{}, false, nil
	}
	info := Info{Version: res[0].rows[0][0], Settings: map[string]string{}}
	res, err = simple(ctx, pgConn, "pgpool show all")
	if err != nil {
		return Info{}, false, err
	}
	for _, row := range res[0].rows {
		if len(row) >= 2 {
			info.Settings[row[0]] = row[1]
		}
	}
	return info, true, nil
}
