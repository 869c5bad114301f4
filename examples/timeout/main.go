// Command timeout shows what happens on the server when a request's deadline
// passes while its transaction runs a slow statement.
//
// Session A calls pgtx.Transaction with a 300ms deadline; inside, it locks a
// row (select ... for update) and runs select pg_sleep(30). Session B, on its
// own connection, waits for the same row lock. The program prints
// pg_stat_activity for both backends before the deadline and right after it,
// and shows that:
//
//   - pgtx cancels the statement on the server (pg_cancel_backend), so the
//     row lock is released at the deadline and B gets it at once, not when
//     pg_sleep (or statement_timeout) would have ended;
//   - the error matches context.DeadlineExceeded, with the server's 57014
//     (query_canceled) still reachable with errors.As (*pgconn.PgError);
//   - the connection is kept: the pool opened no new connection and the
//     same backend pid serves the next query.
//
// It then repeats the scenario a number of times with the default
// CancelModePool and with CancelModeClose (pgx's default behaviour), and
// compares them: CancelModeClose returns a little sooner but pays a reconnect
// for every cancelled statement.
//
// It uses DATABASE_URL when set, otherwise it starts a throwaway PostgreSQL
// and removes it at the end. It exits non-zero if the behaviour above does
// not happen.
//
//	go run ./examples/timeout            # one traced round, then 20 rounds per cancel mode
//	go run ./examples/timeout -short     # one traced round, then 5 rounds per cancel mode
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// The SQL of the two sessions. A selects its own pid in the statement that
// takes the lock, so the program learns which backend is A's.
const (
	lockSQL  = "select pg_backend_pid() from timeout_demo where id = 1 for update"
	sleepSQL = "select pg_sleep(30)"
	waitSQL  = "select id from timeout_demo where id = 1 for update"
)

// maxLockDelay is how long after the deadline B may wait for the lock
// before the program calls the demonstration failed. Without a server-side
// cancel B would wait until statement_timeout (5s) ends pg_sleep.
const maxLockDelay = time.Second

func main() {
	short := flag.Bool("short", false, "run 5 comparison rounds per cancel mode instead of 20 (for CI)")
	deadline := flag.Duration("deadline", 300*time.Millisecond, "the deadline of session A in the traced round")
	rounds := flag.Int("rounds", 20, "comparison rounds per cancel mode (5 with -short)")
	flag.Parse()
	if *short {
		*rounds = 5
	}
	if *deadline <= 0 || *deadline > 3*time.Second || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "timeout: need 0 < -deadline <= 3s and -rounds >= 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *deadline, *rounds); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "timeout: interrupted")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "timeout:", err)
		os.Exit(1)
	}
}

// sessions holds the connections that live outside the pools under test, so
// that they do not disturb the pools' connection counts: observer reads
// pg_stat_activity and waiter is session B.
type sessions struct {
	observer *pgx.Conn
	waiter   *pgx.Conn
}

// run starts (or finds) the server, runs the traced round and the
// comparison, and returns an error when a check fails.
func run(ctx context.Context, deadline time.Duration, rounds int) error {
	dsn, cleanup, err := server.DatabaseURL(ctx)
	if err != nil {
		return err
	}
	defer cleanup()

	s, err := connectSessions(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := s.observer.Exec(ctx, `drop table if exists timeout_demo;
		create table timeout_demo (id int primary key, n int not null);
		insert into timeout_demo values (1, 0)`); err != nil {
		return err
	}

	fmt.Printf("timeout: on %s\n\n", redacted(dsn))
	if err := tracedRound(ctx, dsn, s, deadline); err != nil {
		return err
	}
	if err := compareModes(ctx, dsn, s, rounds); err != nil {
		return err
	}
	fmt.Println("\ntimeout: ok: the deadline cancelled the statement on the server, released its lock and kept the connection")
	return nil
}

// connectSessions opens the observer and session B.
func connectSessions(ctx context.Context, dsn string) (*sessions, error) {
	observer, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	waiter, err := pgx.Connect(ctx, dsn)
	if err != nil {
		_ = observer.Close(ctx)
		return nil, err
	}
	return &sessions{observer: observer, waiter: waiter}, nil
}

// close closes both connections, waiting at most 2s.
func (s *sessions) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.waiter.Close(ctx)
	_ = s.observer.Close(ctx)
}

// newPool opens a pgtx pool of one connection, so that "the same backend
// serves the next query" can only mean the connection was kept.
func newPool(ctx context.Context, dsn string, mode pgtx.CancelMode) (*pgtx.Pool, error) {
	cfg, err := pgtx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 1
	cfg.CancelMode = mode
	return pgtx.NewWithConfig(ctx, cfg)
}

// roundResult is what one round observed.
type roundResult struct {
	err          error         // what Transaction returned to A
	pidA         uint32        // A's backend
	pidNext      uint32        // the backend that served the next query
	toReturn     time.Duration // deadline → Transaction returned
	toLock       time.Duration // deadline → B had the lock
	newConns     int64         // connections the pool opened during the round
	before, past []activity    // pg_stat_activity snapshots (traced round only)
}

// round runs the scenario once on pool: A locks the row and sleeps under a
// deadline, B waits for the lock, and the pool serves one more query. With
// trace set it also takes the two pg_stat_activity snapshots.
func round(ctx context.Context, pool *pgtx.Pool, s *sessions, deadline time.Duration, trace bool) (roundResult, error) {
	var r roundResult
	// Open the pool's connection first, so that NewConnsCount counts only
	// what the cancellation costs.
	if err := pool.QueryRow(ctx, "select 1").Scan(new(int)); err != nil {
		return r, err
	}
	conns0 := pool.Stats().Pool.NewConnsCount()

	aCtx, cancelA := context.WithTimeout(ctx, deadline)
	defer cancelA()
	deadlineAt, _ := aCtx.Deadline()
	locked := make(chan uint32, 1)
	var aDone, bDone time.Time
	var aErr, bErr error
	var wg sync.WaitGroup
	defer wg.Wait() // on every return path: nothing outlives the round

	wg.Go(func() {
		aErr = sessionA(aCtx, pool, locked)
		aDone = time.Now()
	})
	select {
	case r.pidA = <-locked:
	case <-aCtx.Done():
		wg.Wait()
		return r, fmt.Errorf("session A never took the row lock: %v", aErr)
	}
	// B's wait is bounded: without the cancel it would end with A's
	// statement_timeout (5s); 10s is the backstop.
	bCtx, cancelB := context.WithTimeout(ctx, 10*time.Second)
	defer cancelB()
	wg.Go(func() {
		_, bErr = s.waiter.Exec(bCtx, waitSQL)
		bDone = time.Now()
	})
	if trace {
		// Stop polling a little before the deadline, so the snapshot shows
		// the state before it.
		until := deadlineAt.Add(-deadline / 10)
		if err := waitUntilBlocked(ctx, s.observer, r.pidA, s.waiter.PgConn().PID(), until); err != nil {
			return r, err
		}
		snap, err := snapshot(ctx, s.observer, r.pidA, s.waiter.PgConn().PID())
		if err != nil {
			return r, err
		}
		r.before = snap
	}
	wg.Wait()
	r.err = aErr
	if bErr != nil {
		return r, fmt.Errorf("session B: %w", bErr)
	}
	r.toReturn = aDone.Sub(deadlineAt)
	r.toLock = bDone.Sub(deadlineAt)
	if trace {
		snap, err := snapshot(ctx, s.observer, r.pidA, s.waiter.PgConn().PID())
		if err != nil {
			return r, err
		}
		r.past = snap
	}
	if err := pool.QueryRow(ctx, "select pg_backend_pid()").Scan(&r.pidNext); err != nil {
		return r, err
	}
	r.newConns = pool.Stats().Pool.NewConnsCount() - conns0
	return r, nil
}

// sessionA is the slow request: it locks the row, reports its pid on
// locked, and sleeps until its context's deadline stops it.
func sessionA(ctx context.Context, pool *pgtx.Pool, locked chan<- uint32) error {
	opts := pgtx.Options{Label: "slow"}
	return pgtx.TransactionWithOptions(ctx, pool, pgtx.ReadCommitted, opts, func(ctx context.Context, tx pgx.Tx) error {
		var pid uint32
		if err := tx.QueryRow(ctx, lockSQL).Scan(&pid); err != nil {
			return err
		}
		select {
		case locked <- pid:
		default: // a second attempt would find the channel full; timeouts are not retried anyway
		}
		_, err := tx.Exec(ctx, sleepSQL)
		return err
	})
}

// waitUntilBlocked polls pg_stat_activity until backend a sleeps and
// backend b waits for a lock, or until passes (then the snapshot is taken
// anyway). The queries run under ctx, not under A's deadline: pgx closes a
// plain connection whose query is interrupted by its context.
func waitUntilBlocked(ctx context.Context, observer *pgx.Conn, a, b uint32, until time.Time) error {
	for time.Now().Before(until) {
		var ready bool
		err := observer.QueryRow(ctx, `
			select count(*) = 2 from pg_stat_activity
			where (pid = $1 and wait_event = 'PgSleep') or (pid = $2 and wait_event_type = 'Lock')`, a, b).Scan(&ready)
		if err != nil {
			return err
		}
		if ready {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// activity is one row of pg_stat_activity.
type activity struct {
	pid       uint32
	state     string
	wait      string
	query     string
	blockedBy []int32
}

// snapshot reads pg_stat_activity for the given backends: state, wait
// event, the start of the query, and the backends each one waits for.
func snapshot(ctx context.Context, observer *pgx.Conn, pids ...uint32) ([]activity, error) {
	rows, err := observer.Query(ctx, `
		select pid, coalesce(state, ''), coalesce(wait_event_type || ':' || wait_event, ''),
		       left(regexp_replace(query, '\s+', ' ', 'g'), 60), pg_blocking_pids(pid)
		from pg_stat_activity where pid = any($1) order by pid`, pids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (activity, error) {
		var a activity
		err := row.Scan(&a.pid, &a.state, &a.wait, &a.query, &a.blockedBy)
		return a, err
	})
}

// printSnapshot prints a snapshot, naming A and B.
func printSnapshot(title string, snap []activity, pidA uint32) {
	fmt.Printf("  pg_stat_activity %s:\n", title)
	fmt.Printf("    %-3s %-7s %-20s %-20s %s\n", "", "pid", "state", "wait", "query")
	for _, a := range snap {
		who := "B"
		if a.pid == pidA {
			who = "A"
		}
		line := fmt.Sprintf("    %-3s %-7d %-20s %-20s %s", who, a.pid, a.state, a.wait, a.query)
		if len(a.blockedBy) > 0 {
			line += fmt.Sprintf("   (blocked by %v)", a.blockedBy)
		}
		fmt.Println(line)
	}
}

// tracedRound runs the scenario once with the default CancelModePool and
// narrates it.
func tracedRound(ctx context.Context, dsn string, s *sessions, deadline time.Duration) error {
	pool, err := newPool(ctx, dsn, pgtx.CancelModePool)
	if err != nil {
		return err
	}
	defer pool.Close()

	fmt.Printf("1. Session A: pgtx.Transaction with a %v deadline locks row 1 (%s)\n", deadline, lockSQL)
	fmt.Printf("   and runs %s. Session B waits for the same row on its own connection.\n\n", sleepSQL)
	r, err := round(ctx, pool, s, deadline, true)
	if err != nil {
		return err
	}
	printSnapshot("before the deadline (A sleeps holding the lock, B waits for it)", r.before, r.pidA)
	fmt.Printf("  the deadline passes: pgtx sends pg_cancel_backend(%d) over its cancel pool\n", r.pidA)
	fmt.Printf("  Transaction returned %v after the deadline\n", r.toReturn.Round(10*time.Microsecond))
	fmt.Printf("  B got the lock %v after the deadline (without the cancel: when statement_timeout, 5s, ends pg_sleep)\n",
		r.toLock.Round(10*time.Microsecond))
	printSnapshot("right after (A idle after its rollback, B done)", r.past, r.pidA)

	st := pool.Stats()
	var pgErr *pgconn.PgError
	hasPgErr := errors.As(r.err, &pgErr)
	fmt.Println()
	field("error", "%v", r.err)
	field("errors.Is(err, context.DeadlineExceeded)", "%v", errors.Is(r.err, context.DeadlineExceeded))
	field("errors.As(err, &pgErr); pgErr.Code", "%q (57014 query_canceled: the server stopped the statement)", sqlState(r.err))
	if hasPgErr {
		field("pgErr.Message", "%q", pgErr.Message)
	}
	field("pgtx.Classify(err)", "%v (never retried: what took too long takes too long again)", pgtx.Classify(r.err))
	field("pool.Stats().Cancels", "sent %d, signalled %d, closed %d",
		st.Cancels.SentCount, st.Cancels.SignalledCount, st.Cancels.ClosedCount)
	field("new connections during the round", "%d (pool.Stats().Pool.NewConnsCount() = %d)",
		r.newConns, st.Pool.NewConnsCount())
	kept := "the connection was kept"
	if r.newConns != 0 || r.pidNext != r.pidA {
		kept = "the connection was NOT kept"
	}
	field("backend of the next query", "pid %d (A's was %d): %s", r.pidNext, r.pidA, kept)
	fmt.Println()

	var problems []string
	if !errors.Is(r.err, context.DeadlineExceeded) {
		problems = append(problems, fmt.Sprintf("the error %v does not match context.DeadlineExceeded", r.err))
	}
	if code := sqlState(r.err); code != pgerrcode.QueryCanceled {
		problems = append(problems, fmt.Sprintf("SQLSTATE %q, want 57014 from the server's cancel", code))
	}
	if r.toLock > maxLockDelay {
		problems = append(problems, fmt.Sprintf("B waited %v after the deadline for the lock, want < %v", r.toLock, maxLockDelay))
	}
	if r.newConns != 0 || r.pidNext != r.pidA {
		problems = append(problems, fmt.Sprintf("the connection was not kept: %d new connections, next pid %d, A's %d",
			r.newConns, r.pidNext, r.pidA))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
