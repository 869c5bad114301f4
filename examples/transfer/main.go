// Command transfer runs the same concurrent transfers between a few hot
// accounts through three ways of running a transaction, each on its own
// accounts and pool, one after another, and shows side by side what each
// did to the money:
//
//   - the naive retry loop: pgx.BeginTxFunc, run again at once after any
//     error (an error at COMMIT included, though that COMMIT may have been
//     applied), three times in all; then the error is only logged, and the
//     transfer reported done;
//   - pgx.BeginTxFunc once, without retry;
//   - pgtx.Transaction.
//
// The trouble is real: SERIALIZABLE transfers between five accounts
// conflict (40001); every transfer runs under a deadline, and one in twenty
// first runs a check (pg_sleep) longer than it; and each loop reaches the
// server through a fault proxy (faultproxy.Start) that every so often
// lets a COMMIT run, then drops its answer and cuts the connection.
//
// Every transfer is recorded, by its id, in its bank's ledger. At the end
// the program holds what each loop told its callers against the ledger and
// the balances, and prints a row per loop: transfers done, failures by kind,
// and transfers doubled (applied twice), lost (reported done, never applied)
// and hidden (reported failed, yet applied). It exits non-zero if pgtx broke
// the invariant: every transfer it reported done applied once, none it
// reported failed applied, balances that agree with the ledger.
//
// It uses DATABASE_URL when set, otherwise it starts a throwaway PostgreSQL
// from the locally installed binaries (or Docker) and removes it at the end:
//
//	go run ./examples/transfer                  # 5s in all, the three loops in turn
//	go run ./examples/transfer -loops pgtx      # pgtx alone
//	go run ./examples/transfer -dur 30s -workers 32
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"
)

// options are the program's flags.
type options struct {
	dur      time.Duration
	workers  int
	accounts int
	loops    []string
	deadline time.Duration
	cutEvery time.Duration
}

// check is the length of the slow transfers' check: longer than the
// deadline, so that the deadline ends them.
func (o options) check() time.Duration {
	return o.deadline * 5 / 2
}

func main() {
	var o options
	var loops string
	flag.DurationVar(&o.dur, "dur", 5*time.Second, "how long to run transfers, in all (the loops take turns)")
	flag.IntVar(&o.workers, "workers", 8, "concurrent workers per loop")
	flag.IntVar(&o.accounts, "accounts", 5, "number of (hot) accounts per loop")
	flag.StringVar(&loops, "loops", allLoops, "the loops to run side by side, of "+allLoops)
	flag.DurationVar(&o.deadline, "deadline", 100*time.Millisecond,
		"each transfer's deadline; one transfer in 20 runs a check 2.5 times as long (0: no deadline, no check)")
	flag.DurationVar(&o.cutEvery, "cut-every", 100*time.Millisecond,
		"per loop, how often the fault proxy loses a COMMIT's answer (0: no fault proxy)")
	flag.Parse()
	o.loops = strings.Split(loops, ",")
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "transfer:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, o)
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "transfer: interrupted")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "transfer:", err)
		os.Exit(1)
	}
}

// validate refuses flags the program cannot run with.
func (o options) validate() error {
	if o.dur <= 0 || o.workers < 1 || o.accounts < 2 || o.deadline < 0 || o.cutEvery < 0 {
		return errors.New("need -dur > 0, -workers >= 1, -accounts >= 2, -deadline >= 0 and -cut-every >= 0")
	}
	known := strings.Split(allLoops, ",")
	for i, l := range o.loops {
		if !slices.Contains(known, l) {
			return fmt.Errorf("-loops: no loop %q (want some of %s)", l, allLoops)
		}
		if slices.Contains(o.loops[:i], l) {
			return fmt.Errorf("-loops: %q twice", l)
		}
	}
	return nil
}
