// Command replica shows a circuit breaker opening on a slow read replica,
// reads falling back to the primary, and the breaker closing again once the
// replica recovers.
//
// There is one database. The "primary" pool connects to it directly; the
// "replica" pool goes through a fault-injecting TCP proxy (faultproxy.Start)
// and has a circuit breaker (Config.Breaker: a call of 200ms or more is slow,
// 3 failures in a row open it, it stays open for 1s) and a CancelGrace of
// 100ms, so that a read that gives up on the replica does not wait for the
// replica's cancel. A replica.Router sends reads to the replica and falls
// back to the primary. A few readers read in a loop through three phases:
//
//  1. healthy: the replica serves the reads;
//  2. slow: the proxy delays every message to the replica by 2s. The first
//     reads wait for the router's 300ms ReplicaTimeout and fall back; after 3
//     of them the breaker opens and the primary serves every read at once,
//     but for one half-open probe per second that tries the replica again;
//  3. recovered: the delay is gone; the next half-open probe succeeds, the
//     breaker closes, and the replica serves the reads again.
//
// It prints a live line every half second, the breaker's state changes (a
// pgtx.BreakerTracer), p50/p99 latency and who served the reads per phase,
// and router.Stats(). It uses DATABASE_URL (a postgres:// URL, reachable over
// TCP) when set, otherwise it starts a throwaway PostgreSQL and removes it at
// the end. It exits non-zero if the breaker does not open, reads fail
// instead of falling back, or the replica does not take the reads back.
//
//	go run ./examples/replica           # phases of 2s, 5s and 4s
//	go run ./examples/replica -short    # phases of 0.6s, 2.2s and 2.5s (for CI)
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
	"github.com/pgtx-go/pgtx/replica"
)

// The fault and the limits that react to it.
const (
	replicaLatency    = 2 * time.Second        // added to every message to the replica in the slow phase
	replicaTimeout    = 300 * time.Millisecond // the router gives up on the replica after this
	slowCallThreshold = 200 * time.Millisecond // a replica call this long counts as slow
	openFor           = time.Second            // the breaker stays open this long before a probe
	readPause         = 10 * time.Millisecond  // each reader's pause between reads
)

func main() {
	short := flag.Bool("short", false, "shorter phases (for CI)")
	readers := flag.Int("readers", 4, "concurrent readers")
	flag.Parse()
	if *readers < 1 || *readers > 64 {
		fmt.Fprintln(os.Stderr, "replica: need 1 <= -readers <= 64")
		os.Exit(2)
	}
	durs := phaseDurations{healthy: 2 * time.Second, slow: 5 * time.Second, recovered: 4 * time.Second}
	if *short {
		durs = phaseDurations{healthy: 600 * time.Millisecond, slow: 2200 * time.Millisecond, recovered: 2500 * time.Millisecond}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, durs, *readers); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "replica: interrupted")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "replica:", err)
		os.Exit(1)
	}
}

type phaseDurations struct{ healthy, slow, recovered time.Duration }

// The phases. phaseOpen is the slow phase once the breaker has opened.
const (
	phaseHealthy int32 = iota
	phaseSlow
	phaseOpen
	phaseRecovered
	numPhases
)

var phaseNames = [numPhases]string{"healthy", "slow", "breaker open", "recovered"}

// run sets up the server, the proxy, the two pools and the router, runs
// the phases, reports, and returns an error when a check fails.
func run(ctx context.Context, durs phaseDurations, readers int) error {
	dsn, cleanup, err := server.DatabaseURL(ctx)
	if err != nil {
		return err
	}
	defer cleanup()

	addr, err := serverAddr(dsn)
	if err != nil {
		return err
	}
	proxy, err := faultproxy.Start(addr)
	if err != nil {
		return err
	}
	defer func() {
		if err := proxy.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "replica: closing the proxy:", err)
		}
	}()
	replicaDSN, err := proxy.DSN(dsn)
	if err != nil {
		return fmt.Errorf("%w (this demo needs a postgres:// URL)", err)
	}

	d := &demo{start: time.Now()}
	primary, replicaPool, err := openPools(ctx, dsn, replicaDSN, readers, d)
	if err != nil {
		return err
	}
	defer primary.Close()
	defer func() {
		// Closed before the proxy, which it goes through. Without the
		// latency (still on after an interrupt) its goodbyes are quick.
		proxy.SetLatency(0)
		replicaPool.Close()
	}()
	router, err := replica.New(primary, []*pgtx.Pool{replicaPool}, &replica.Config{ReplicaTimeout: replicaTimeout})
	if err != nil {
		return err
	}
	d.router, d.replica = router, replicaPool
	if err := setup(ctx, primary); err != nil {
		return err
	}

	fmt.Printf("replica: %d readers; primary %s directly, replica through the proxy at %s\n", readers, addr, proxy.Addr())
	fmt.Printf("replica: breaker: slow from %v, opens after 3 failures in a row, open for %v; ReplicaTimeout %v, CancelGrace 100ms\n\n",
		slowCallThreshold, openFor, replicaTimeout)
	err = d.runPhases(ctx, proxy, durs, readers)
	d.report()
	if err != nil {
		return err
	}
	if err := d.check(); err != nil {
		return err
	}
	explain()
	fmt.Println("\nreplica: ok: the breaker opened on the slow replica, the primary served the reads, and the replica took them back")
	return nil
}

// serverAddr returns the host:port of the server dsn names.
func serverAddr(dsn string) (string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", err
	}
	if cfg.Host == "" || cfg.Host[0] == '/' {
		return "", fmt.Errorf("the server is reached over a Unix socket (%s); the proxy needs TCP", cfg.Host)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// openPools opens the primary pool and the replica pool with its breaker.
// Each pool names itself in application_name, so that a read can tell which
// one served it.
func openPools(ctx context.Context, dsn, replicaDSN string, readers int, tracer pgtx.BreakerTracer) (primary, replica *pgtx.Pool, err error) {
	pcfg, err := pgtx.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	pcfg.MaxConns = int32(readers)
	pcfg.ConnConfig.RuntimeParams["application_name"] = "primary"

	rcfg, err := pgtx.ParseConfig(replicaDSN)
	if err != nil {
		return nil, nil, err
	}
	// A connection given up on keeps its pool slot until its close
	// handshake with the slow server has ended (about the latency): twice
	// the readers leaves room for fresh connections once the replica is
	// fast again.
	rcfg.MaxConns = int32(2 * readers)
	rcfg.ConnConfig.RuntimeParams["application_name"] = "replica"
	rcfg.CancelGrace = 100 * time.Millisecond // a read that falls back does not wait for the slow replica's cancel
	rcfg.AcquireTimeout = replicaTimeout      // nor for a connection to it
	rcfg.Breaker = &pgtx.BreakerConfig{
		Name:                "replica",
		SlowCallThreshold:   slowCallThreshold,
		ConsecutiveFailures: 3,
		OpenFor:             openFor,
		Tracer:              tracer,
	}

	if primary, err = pgtx.NewWithConfig(ctx, pcfg); err != nil {
		return nil, nil, err
	}
	if replica, err = pgtx.NewWithConfig(ctx, rcfg); err != nil {
		primary.Close()
		return nil, nil, err
	}
	return primary, replica, nil
}

// setup creates the table the readers read.
func setup(ctx context.Context, pool *pgtx.Pool) error {
	_, err := pool.Exec(ctx, `drop table if exists replica_items;
		create table replica_items (id int primary key, name text not null);
		insert into replica_items select g, 'item ' || g from generate_series(1, 100) g`)
	return err
}

// sample is one read.
type sample struct {
	phase  int32
	start  time.Time
	dur    time.Duration
	server string // application_name of the pool that served it
	err    error
}

// demo holds the run's state: the current phase, the reads, and the
// breaker's state changes. It is the replica breaker's BreakerTracer.
type demo struct {
	start   time.Time
	router  *replica.Router
	replica *pgtx.Pool
	phase   atomic.Int32

	printMu sync.Mutex // one line at a time from the readers' tracer calls and the live line

	mu      sync.Mutex
	samples []sample
	events  []breakerEvent
}

type breakerEvent struct {
	at    time.Time
	phase int32
	data  pgtx.TraceBreakerStateChangeData
}

// TraceBreakerStateChange prints a state change and remembers it. The first
// opening during the slow phase starts the "breaker open" phase.
func (d *demo) TraceBreakerStateChange(_ context.Context, data pgtx.TraceBreakerStateChangeData) {
	if data.To == pgtx.BreakerOpen {
		d.phase.CompareAndSwap(phaseSlow, phaseOpen)
	}
	now := time.Now()
	d.mu.Lock()
	d.events = append(d.events, breakerEvent{at: now, phase: d.phase.Load(), data: data})
	d.mu.Unlock()
	d.printf("%6.2fs  breaker %s: %v -> %v (%s; window: %d calls, %d failed, %d slow)\n",
		now.Sub(d.start).Seconds(), data.Name, data.From, data.To, data.Reason, data.Calls, data.Failures, data.Slow)
}

// printf prints one line without interleaving with the other printers.
func (d *demo) printf(format string, args ...any) {
	d.printMu.Lock()
	defer d.printMu.Unlock()
	fmt.Printf(format, args...)
}

// runPhases runs the readers through the three phases and joins them.
func (d *demo) runPhases(ctx context.Context, proxy *faultproxy.Proxy, durs phaseDurations, readers int) error {
	runCtx, stopReaders := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for r := range readers {
		wg.Go(func() { d.reader(runCtx, r) })
	}
	wg.Go(func() { d.live(runCtx) })
	defer func() {
		stopReaders()
		wg.Wait()
	}()

	d.printf("%6.2fs  phase healthy: reads go to the replica\n", time.Since(d.start).Seconds())
	if err := sleep(ctx, durs.healthy); err != nil {
		return err
	}
	d.printf("%6.2fs  phase slow: proxy.SetLatency(%v) delays every message to the replica\n", time.Since(d.start).Seconds(), replicaLatency)
	d.phase.Store(phaseSlow)
	proxy.SetLatency(replicaLatency)
	if err := sleep(ctx, durs.slow); err != nil {
		return err
	}
	d.printf("%6.2fs  phase recovered: proxy.SetLatency(0); the breaker closes after its next half-open probe\n", time.Since(d.start).Seconds())
	proxy.SetLatency(0)
	d.phase.Store(phaseRecovered)
	return sleep(ctx, durs.recovered)
}

// reader reads a random item through the router until ctx ends.
func (d *demo) reader(ctx context.Context, seed int) {
	for id := seed%100 + 1; ctx.Err() == nil; id = id%100 + 1 {
		s := sample{phase: d.phase.Load(), start: time.Now()}
		s.server, s.err = d.read(ctx, id)
		s.dur = time.Since(s.start)
		if ctx.Err() != nil {
			return // the run ended during this read: not counted
		}
		d.mu.Lock()
		d.samples = append(d.samples, s)
		d.mu.Unlock()
		if sleep(ctx, readPause) != nil {
			return
		}
	}
}

// read runs one read-only transaction through the router and returns the
// application_name of the pool that served it. fn may run twice (on the
// replica, then on the primary): the last run's answer is the one kept.
func (d *demo) read(ctx context.Context, id int) (string, error) {
	var name, server string
	err := d.router.Read(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, "select name, current_setting('application_name') from replica_items where id = $1", id).
			Scan(&name, &server)
	})
	return server, err
}

// live prints a progress line every half second: the reads of the last
// interval, who served them, and the breaker's state.
func (d *demo) live(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	seen := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.mu.Lock()
		recent := slices.Clone(d.samples[seen:])
		seen = len(d.samples)
		d.mu.Unlock()
		var onReplica, onPrimary, failed int
		var durs []time.Duration
		for _, s := range recent {
			switch {
			case s.err != nil:
				failed++
			case s.server == "replica":
				onReplica++
			default:
				onPrimary++
			}
			durs = append(durs, s.dur)
		}
		slices.Sort(durs)
		rs := d.router.Stats()
		d.printf("%6.2fs  %-12s reads %4d (replica %4d, primary %4d, failed %d)  p99 %-9v breaker %-9v router: replica %d, fallbacks %d\n",
			time.Since(d.start).Seconds(), phaseNames[d.phase.Load()], len(recent), onReplica, onPrimary, failed,
			percentile(durs, 0.99), d.replica.Stats().Breaker.State, rs.ReplicaReadCount, rs.FallbackCount)
	}
}
