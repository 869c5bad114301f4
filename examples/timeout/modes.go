package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
)

// modeSummary aggregates the rounds of one cancel mode.
type modeSummary struct {
	mode             pgtx.CancelMode
	toReturn, toLock []time.Duration
	reconnects       int64
	samePid          int
	sqlstate57014    int
}

// compareModes runs the scenario rounds times per cancel mode, with a
// 100ms deadline, and prints one line per mode.
func compareModes(ctx context.Context, dsn string, s *sessions, rounds int) error {
	const deadline = 100 * time.Millisecond
	fmt.Printf("2. The same scenario %d times per cancel mode, %v deadline, a pool of one connection:\n\n", rounds, deadline)
	var sums []modeSummary
	for _, mode := range []pgtx.CancelMode{pgtx.CancelModePool, pgtx.CancelModeClose} {
		sum, err := runMode(ctx, dsn, s, mode, rounds, deadline)
		if err != nil {
			return fmt.Errorf("%v: %w", mode, err)
		}
		sums = append(sums, sum)
	}
	fmt.Printf("  %-18s %-26s %-26s %-12s %-14s %s\n", "mode", "deadline→return p50/max", "deadline→lock p50/max",
		"reconnects", "same backend", "57014 seen")
	for _, m := range sums {
		name := "CancelModeClose"
		if m.mode == pgtx.CancelModePool {
			name = "CancelModePool"
		}
		fmt.Printf("  %-18s %-26s %-26s %-12s %-14s %d/%d\n", name,
			p50max(m.toReturn), p50max(m.toLock),
			fmt.Sprintf("%d/%d", m.reconnects, rounds), fmt.Sprintf("%d/%d", m.samePid, rounds), m.sqlstate57014, rounds)
	}
	fmt.Println()
	fmt.Println("  CancelModePool waits for pg_cancel_backend before the connection is used again, so it keeps")
	fmt.Println("  the connection and the server's 57014. CancelModeClose returns sooner but closes the")
	fmt.Println("  connection: every cancelled statement costs a reconnect, which under a timeout storm")
	fmt.Println("  becomes a reconnect storm.")

	pool, closeMode := sums[0], sums[1]
	switch {
	case pool.reconnects != 0:
		return fmt.Errorf("CancelModePool reconnected %d times in %d rounds, want 0", pool.reconnects, rounds)
	case pool.samePid != rounds:
		return fmt.Errorf("CancelModePool: the same backend served the next query in %d of %d rounds", pool.samePid, rounds)
	case closeMode.reconnects != int64(rounds):
		return fmt.Errorf("CancelModeClose reconnected %d times in %d rounds, want %d", closeMode.reconnects, rounds, rounds)
	case slices.Max(pool.toLock) > maxLockDelay:
		return fmt.Errorf("CancelModePool: the lock was released %v after the deadline, want < %v", slices.Max(pool.toLock), maxLockDelay)
	}
	return nil
}

// runMode runs the scenario rounds times on a fresh pool with the given
// cancel mode and aggregates what the rounds observed.
func runMode(ctx context.Context, dsn string, s *sessions, mode pgtx.CancelMode, rounds int, deadline time.Duration) (modeSummary, error) {
	sum := modeSummary{mode: mode}
	pool, err := newPool(ctx, dsn, mode)
	if err != nil {
		return sum, err
	}
	defer pool.Close()
	for range rounds {
		r, err := round(ctx, pool, s, deadline, false)
		if err != nil {
			return sum, err
		}
		if !errors.Is(r.err, context.DeadlineExceeded) {
			return sum, fmt.Errorf("the error %v does not match context.DeadlineExceeded", r.err)
		}
		sum.toReturn = append(sum.toReturn, r.toReturn)
		sum.toLock = append(sum.toLock, r.toLock)
		sum.reconnects += r.newConns
		if r.pidNext == r.pidA {
			sum.samePid++
		}
		if sqlState(r.err) == pgerrcode.QueryCanceled {
			sum.sqlstate57014++
		}
	}
	return sum, nil
}

// sqlState returns the SQLSTATE of the last *pgconn.PgError in err's chain,
// or "" when there is none.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// field prints one labelled line of the narrative.
func field(label, format string, args ...any) {
	fmt.Printf("  %-42s %s\n", label, fmt.Sprintf(format, args...))
}

// p50max formats the median and the maximum of ds.
func p50max(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%v / %v", s[len(s)/2].Round(10*time.Microsecond), s[len(s)-1].Round(10*time.Microsecond))
}

// redacted names the server without the credentials in dsn.
func redacted(dsn string) string {
	if cfg, err := pgx.ParseConfig(dsn); err == nil {
		return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	}
	return "the database"
}
