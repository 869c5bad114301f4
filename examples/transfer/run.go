package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// Bounds of the steps around the transfers.
const (
	setupTimeout  = 30 * time.Second // the schemas, the pools, the proxies
	settleTimeout = 10 * time.Second // the loops' sessions ending, after the pools closed
	auditTimeout  = 30 * time.Second // reading the books, dropping the schemas
)

// contender is a loop at work: its pool, its fault proxy, its bank, and
// what its workers saw.
type contender struct {
	*loop
	schema   string
	app      string       // the application_name of its sessions
	faults   *faults      // nil without a fault proxy
	done     atomic.Int64 // transfers reported done so far
	outcomes [][]outcome  // per worker
	stats    pgtx.Stats   // pgtx's pool statistics at the end (the pgtx loop)
	cuts     int64        // COMMIT answers the proxy lost
	ran      bool         // its workers ran (not all did after an interrupt)
	closed   bool
}

// run runs the loops o names, one after another, and reports on them side
// by side.
func run(ctx context.Context, o options) error {
	srv, err := findServer(ctx)
	if err != nil {
		return err
	}
	defer srv.stop()
	setupCtx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	admin, err := pgx.Connect(setupCtx, srv.dsn)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(srv.dsn), err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = admin.Close(ctx)
	}()
	var version string
	if err := admin.QueryRow(setupCtx, "select current_setting('server_version')").Scan(&version); err != nil {
		return err
	}
	version, _, _ = strings.Cut(version, " ")
	fmt.Printf("server: %s\n", srv.describe(version))

	app := fmt.Sprintf("transfer-demo-%d", os.Getpid())
	var cs []*contender
	defer func() {
		for _, c := range cs {
			c.shutdown()
		}
	}()
	for _, key := range o.loops {
		c, err := newContender(setupCtx, admin, srv, o, key, app+"-"+key)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		cs = append(cs, c)
	}
	header(o, cs, srv)

	// The loops run one after another, each alone on the server for its
	// share of -dur: run at the same time, they would compete for the
	// machine too, and the loops that never pause would take it from pgtx.
	share := o.dur / time.Duration(len(cs))
	auditCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout+settleTimeout*time.Duration(len(cs)))
	defer cancel()
	for _, c := range cs {
		c.ran = true
		c.race(ctx, o, share)
		c.shutdown()
		// What the loop told its callers is known; what the server applied
		// is known once its sessions are gone, also after an interrupt.
		if err := settle(auditCtx, admin, c.app); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	rows := make([]tally, 0, len(cs))
	for _, c := range cs {
		if !c.ran {
			continue
		}
		b, err := readBooks(auditCtx, admin, c.schema, o.accounts)
		if err != nil {
			return fmt.Errorf("%s: read the books: %w", c.name, err)
		}
		rows = append(rows, judge(c.name, slices.Concat(c.outcomes...), b, c.cuts))
	}
	fmt.Println()
	writeTable(os.Stdout, rows)
	footer(os.Stdout, cs)
	line, kept := verdict(rows)
	fmt.Println()
	fmt.Println(line)
	if !kept {
		return fmt.Errorf("pgtx broke the invariant; its tables are kept in schema %s", schemaOf(keyPgtx))
	}
	for _, c := range cs {
		if err := dropBank(auditCtx, admin, c.schema); err != nil {
			return err
		}
	}
	return nil
}

// schemaOf is the schema of the loop named key.
func schemaOf(key string) string { return "transfer_" + key }

// newContender makes the bank of the loop named key and opens its pool,
// through a fault proxy of its own when one may stand before the server.
func newContender(ctx context.Context, admin *pgx.Conn, srv *server, o options, key, app string) (*contender, error) {
	c := &contender{schema: schemaOf(key), app: app, outcomes: make([][]outcome, o.workers)}
	if err := createBank(ctx, admin, c.schema, o.accounts); err != nil {
		return nil, err
	}
	proxyAddr := ""
	if srv.addr != "" && o.cutEvery > 0 {
		f, err := newFaults(srv.addr, o.cutEvery)
		if err != nil {
			return nil, err
		}
		c.faults, proxyAddr = f, f.proxy.Addr()
	}
	l, err := newLoop(ctx, key, srv.dsn, proxyAddr, app, c.schema, o.workers)
	if err != nil {
		if c.faults != nil {
			err = errors.Join(err, c.faults.close())
		}
		return nil, err
	}
	c.loop = l
	return c, nil
}

// header says what runs, how, and on which server.
func header(o options, cs []*contender, srv *server) {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.name
	}
	each := ""
	if len(cs) > 1 {
		each = fmt.Sprintf(", one after another, %v each, each on its own accounts",
			(o.dur / time.Duration(len(cs))).Round(time.Millisecond))
	}
	fmt.Printf("transfer: %s for %v%s; %d workers, %d hot accounts\n",
		strings.Join(names, ", "), o.dur, each, o.workers, o.accounts)
	if o.deadline > 0 {
		fmt.Printf("  every transfer SERIALIZABLE under a %v deadline; 1 in %d first runs a %v check (pg_sleep)\n",
			o.deadline, slowShare, o.check())
	} else {
		fmt.Println("  every transfer SERIALIZABLE, with no deadline")
	}
	switch {
	case o.cutEvery == 0:
		fmt.Println("  no fault proxy (-cut-every 0)")
	case srv.addr == "":
		fmt.Printf("  no fault proxy: %s\n", srv.noProxy)
	default:
		fmt.Printf("  each loop through a fault proxy that loses a COMMIT's answer every %v (the COMMIT is applied, the connection cut)\n",
			o.cutEvery)
	}
}

// race runs the contender's workers for dur, with a progress line on a
// terminal.
func (c *contender) race(ctx context.Context, o options, dur time.Duration) {
	end := time.Now().Add(dur)
	if c.faults != nil {
		c.faults.start()
	}
	var wg sync.WaitGroup
	for w := range o.workers {
		wg.Go(func() { c.outcomes[w] = c.worker(ctx, o, end, w) })
	}
	stop := make(chan struct{})
	var progress sync.WaitGroup
	if st, err := os.Stdout.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		progress.Go(func() { c.showProgress(stop) })
	}
	wg.Wait()
	close(stop)
	progress.Wait()
}

// worker runs transfers one after another until end. Worker w of every
// loop draws the same transfers, so the loops run the same workload.
func (c *contender) worker(ctx context.Context, o options, end time.Time, w int) []outcome {
	rng := rand.New(rand.NewPCG(uint64(w), 42))
	var out []outcome
	for seq := int64(1); ctx.Err() == nil && time.Now().Before(end); seq++ {
		t := nextTransfer(rng, int64(w)<<32|seq, o.accounts, o.check())
		out = append(out, c.transfer(ctx, t, o.deadline))
	}
	return out
}

// transfer runs t through the loop, under deadline when it is positive.
func (c *contender) transfer(ctx context.Context, t transferReq, deadline time.Duration) outcome {
	if deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, deadline)
		defer cancel()
	}
	o := outcome{t: t}
	start := time.Now()
	told, gaveUp := c.run(ctx, func(ctx context.Context, tx pgx.Tx) error {
		o.attempts++
		return t.apply(ctx, tx)
	})
	o.latency = time.Since(start)
	o.done = told == nil
	o.unknown = errors.Is(told, pgtx.ErrCommitUnknown)
	if gaveUp != nil {
		o.gaveUp, o.k = true, kindOf(gaveUp)
	}
	if o.done {
		c.done.Add(1)
	}
	return o
}

// shutdown stops the fault schedule, keeps pgtx's statistics, and closes
// the pool and the proxy. Later calls do nothing.
func (c *contender) shutdown() {
	if c.closed {
		return
	}
	c.closed = true
	if c.faults != nil {
		c.faults.halt()
		c.cuts = c.faults.cuts()
	}
	if c.pgtx != nil {
		c.stats = c.pgtx.Stats()
	}
	c.close()
	if c.faults != nil {
		_ = c.faults.close()
	}
}
