package integration

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// chaosAdminTimeout bounds every statement and connect of the fault injector.
const chaosAdminTimeout = 3 * time.Second

// chaosFault is one kind of fault the injector picks at random, in
// proportion to its weight.
type chaosFault struct {
	name   string
	weight int
	// inject applies the fault and reports whether it did: a fault that
	// found nothing to act on (no pool backend to terminate) is skipped.
	// Its error is a harness problem (an admin connection that failed),
	// logged and counted, not a test failure.
	inject func(ctx context.Context, in *chaosInjector) (bool, error)
}

// chaosFaults are the faults of a run besides the single server restart.
// The cut rules fire once, on the next matching statement of any pool
// connection; the others act for a short, random while.
var chaosFaults = []chaosFault{
	{"cut before BEGIN", 3, func(_ context.Context, in *chaosInjector) (bool, error) {
		in.proxy.CutBeforeForward(faultproxy.MatchPrefix("begin"), 1)
		return true, nil
	}},
	{"cut before UPDATE", 3, func(_ context.Context, in *chaosInjector) (bool, error) {
		in.proxy.CutBeforeForward(faultproxy.MatchPrefix("update accounts"), 1)
		return true, nil
	}},
	{"cut after UPDATE", 3, func(_ context.Context, in *chaosInjector) (bool, error) {
		in.proxy.CutAfterForward(faultproxy.MatchPrefix("update accounts"), 1)
		return true, nil
	}},
	{"cut before COMMIT", 2, func(_ context.Context, in *chaosInjector) (bool, error) {
		in.proxy.CutBeforeForward(faultproxy.IsCommit, 1)
		return true, nil
	}},
	{"cut after COMMIT forwarded", 3, func(_ context.Context, in *chaosInjector) (bool, error) {
		in.proxy.CutOnCommit(1)
		return true, nil
	}},
	{"COMMIT answer dropped", 3, func(_ context.Context, in *chaosInjector) (bool, error) {
		in.proxy.CutOnCommitReply(1)
		return true, nil
	}},
	{"latency spike", 1, func(ctx context.Context, in *chaosInjector) (bool, error) { return in.latencySpike(ctx) }},
	{"refuse new connections + cut all", 1, func(ctx context.Context, in *chaosInjector) (bool, error) { return in.refuseNew(ctx) }},
	{"starting up (57P03) + cut all", 1, func(ctx context.Context, in *chaosInjector) (bool, error) { return in.startingUp(ctx) }},
	{"terminate a pool backend", 2, func(ctx context.Context, in *chaosInjector) (bool, error) {
		n, err := in.terminate(ctx, 1)
		return n > 0, err
	}},
	{"server full (53300)", 1, func(ctx context.Context, in *chaosInjector) (bool, error) { return in.serverFull(ctx) }},
}

// chaosInjector injects faults through the proxy and the server until its
// context ends. It is used by one goroutine; its counts are read after that
// goroutine has been joined.
type chaosInjector struct {
	t     *testing.T
	srv   *server.Server
	proxy *faultproxy.Proxy
	dsn   string // the test database, directly (not through the proxy)
	rng   *rand.Rand

	admin *pgx.Conn // direct admin connection; reconnected when it dies

	injected map[string]int // faults applied, by kind
	skipped  map[string]int // faults that found nothing to act on, or failed
	hogs     int            // connections opened by "server full", in all
	full     int            // "server full" faults that reached 53300
	restart  time.Duration  // how long the restart took; 0 if none
	crashes  []time.Duration
}

// newChaosInjector returns an injector for the server srv behind proxy;
// dsn reaches the test database directly. seed fixes the order of the
// faults and their parameters.
func newChaosInjector(t *testing.T, srv *server.Server, proxy *faultproxy.Proxy, dsn string, seed uint64) *chaosInjector {
	return &chaosInjector{
		t: t, srv: srv, proxy: proxy, dsn: dsn,
		rng:      rand.New(rand.NewPCG(seed, 0x5eed)),
		injected: make(map[string]int),
		skipped:  make(map[string]int),
	}
}

// run injects faults until runCtx ends, one every 30–170ms; restarts the
// server once, at a random point between 30% and 60% of dur; and crashes it
// twice (an immediate shutdown, then a start: crash recovery, as after a
// kill -9 of the postmaster), between 10% and 25% and between 65% and 85%
// of dur. Once dur has passed and the restarts are done (one that a slow
// machine pushed past dur is run then), it ends the run with stop, which
// cancels runCtx. The restarts are bounded by ctx, which outlives runCtx;
// every other wait ends with runCtx. It leaves the proxy without rules,
// latency or refusal, and closes its admin connection.
func (in *chaosInjector) run(ctx, runCtx context.Context, dur time.Duration, stop context.CancelFunc) {
	defer stop()
	defer in.closeAdmin()
	defer in.proxy.Reset()
	total := 0
	for _, f := range chaosFaults {
		total += f.weight
	}
	start := time.Now()
	at := func(from, to float64) time.Time {
		return start.Add(time.Duration((from + (to-from)*in.rng.Float64()) * float64(dur)))
	}
	restartAt := at(0.3, 0.6)
	crashAt := []time.Time{at(0.1, 0.25), at(0.65, 0.85)}
	restarted := false
	for runCtx.Err() == nil {
		over := time.Since(start) >= dur
		if over && restarted && len(crashAt) == 0 {
			return
		}
		if !restarted && (over || !time.Now().Before(restartAt)) {
			restarted = true
			in.restartServer(ctx)
			continue
		}
		if len(crashAt) > 0 && (over || !time.Now().Before(crashAt[0])) {
			crashAt = crashAt[1:]
			in.crashServer(ctx)
			continue
		}
		pick := in.rng.IntN(total)
		f := chaosFaults[0]
		for _, c := range chaosFaults {
			if pick < c.weight {
				f = c
				break
			}
			pick -= c.weight
		}
		ok, err := f.inject(runCtx, in)
		switch {
		case err != nil && runCtx.Err() == nil:
			in.t.Logf("chaos: %s: %v", f.name, err)
			in.skipped[f.name]++
		case ok:
			in.injected[f.name]++
		default:
			in.skipped[f.name]++
		}
		chaosPause(runCtx, 30*time.Millisecond+time.Duration(in.rng.Int64N(int64(140*time.Millisecond))))
	}
}

// restartServer restarts the server with a fast shutdown and a short
// downtime. A failed restart fails the test: the harness is broken.
func (in *chaosInjector) restartServer(ctx context.Context) {
	downtime := 200*time.Millisecond + time.Duration(in.rng.Int64N(int64(200*time.Millisecond)))
	start := time.Now()
	err := in.srv.Restart(ctx, downtime)
	in.closeAdmin() // its session ended with the server
	if err != nil {
		in.t.Errorf("chaos: restart: %v", err)
		return
	}
	in.restart = time.Since(start)
	in.injected["server restart"]++
	in.t.Logf("chaos: server restarted (downtime %v, back after %v)", downtime.Round(time.Millisecond), in.restart.Round(time.Millisecond))
}

// crashServer stops the server at once (an immediate shutdown: no
// checkpoint, every session ended, COMMITs in flight cut) and starts it
// again after a short downtime: crash recovery, which gives again the ids of
// transactions whose records never reached the WAL. A failed crash or start
// fails the test: the harness is broken.
func (in *chaosInjector) crashServer(ctx context.Context) {
	downtime := 50*time.Millisecond + time.Duration(in.rng.Int64N(int64(250*time.Millisecond)))
	start := time.Now()
	err := in.srv.Crash(ctx)
	in.closeAdmin()
	if err == nil {
		chaosPause(ctx, downtime)
		err = in.srv.Start(ctx)
	}
	if err != nil {
		in.t.Errorf("chaos: crash restart: %v", err)
		return
	}
	in.crashes = append(in.crashes, time.Since(start))
	in.injected["crash restart"]++
	in.t.Logf("chaos: server crashed (downtime %v, back after %v)", downtime.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// latencySpike delays every client→server message by 20–150ms for
// 200–800ms.
func (in *chaosInjector) latencySpike(ctx context.Context) (bool, error) {
	in.proxy.SetLatency(20*time.Millisecond + time.Duration(in.rng.Int64N(int64(130*time.Millisecond))))
	chaosPause(ctx, 200*time.Millisecond+time.Duration(in.rng.Int64N(int64(600*time.Millisecond))))
	in.proxy.SetLatency(0)
	return true, nil
}

// refuseNew makes the proxy refuse new connections and cuts every current
// one, for 100–400ms: the pool loses all its connections and cannot open
// new ones for a while.
func (in *chaosInjector) refuseNew(ctx context.Context) (bool, error) {
	in.proxy.RefuseNew(true)
	in.proxy.CutAll()
	chaosPause(ctx, 100*time.Millisecond+time.Duration(in.rng.Int64N(int64(300*time.Millisecond))))
	in.proxy.RefuseNew(false)
	return true, nil
}

// startingUp makes the proxy answer new connections with FATAL 57P03, as a
// server starting up does, and cuts every current one, for 100–400ms.
func (in *chaosInjector) startingUp(ctx context.Context) (bool, error) {
	in.proxy.RejectNew("57P03")
	in.proxy.CutAll()
	chaosPause(ctx, 100*time.Millisecond+time.Duration(in.rng.Int64N(int64(300*time.Millisecond))))
	in.proxy.RejectNew("")
	return true, nil
}

// serverFull fills the server's connection slots with direct connections
// until it refuses one with 53300, terminates two pool backends so the pool
// must reconnect into a full server, holds for 150–400ms, then frees the
// slots.
func (in *chaosInjector) serverFull(ctx context.Context) (bool, error) {
	if _, err := in.conn(ctx); err != nil { // before the server is full
		return false, err
	}
	var hogs []*pgx.Conn
	defer func() {
		for _, c := range hogs {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), chaosAdminTimeout)
			_ = c.Close(cctx)
			cancel()
		}
	}()
	refused := false
	for len(hogs) < 2*chaosMaxConnections && ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, chaosAdminTimeout)
		c, err := pgx.Connect(cctx, in.dsn)
		cancel()
		if err != nil {
			refused = sqlState(err) == pgerrcode.TooManyConnections
			break
		}
		hogs = append(hogs, c)
	}
	in.hogs += len(hogs)
	if !refused {
		return false, nil
	}
	in.full++
	if _, err := in.terminate(ctx, 2); err != nil {
		return true, err
	}
	chaosPause(ctx, 150*time.Millisecond+time.Duration(in.rng.Int64N(int64(250*time.Millisecond))))
	return true, nil
}

// terminate ends up to n random backends of the pool under test (matched
// by application_name; the admin connection itself is excluded) with
// pg_terminate_backend, and returns how many it ended.
func (in *chaosInjector) terminate(ctx context.Context, n int) (int, error) {
	admin, err := in.conn(ctx)
	if err != nil {
		return 0, err
	}
	qctx, cancel := context.WithTimeout(ctx, chaosAdminTimeout)
	defer cancel()
	var ended int
	err = admin.QueryRow(qctx, `select count(*) filter (where pg_terminate_backend(pid)) from (
		select pid from pg_stat_activity
		where application_name = $1 and pid <> pg_backend_pid()
		order by random() limit $2) victims`, chaosAppName, n).Scan(&ended)
	if err != nil {
		in.closeAdmin()
		return 0, err
	}
	return ended, nil
}

// conn returns the admin connection, connecting if there is none.
func (in *chaosInjector) conn(ctx context.Context) (*pgx.Conn, error) {
	if in.admin != nil && !in.admin.IsClosed() {
		return in.admin, nil
	}
	in.closeAdmin()
	cctx, cancel := context.WithTimeout(ctx, chaosAdminTimeout)
	defer cancel()
	c, err := pgx.Connect(cctx, in.dsn)
	if err != nil {
		return nil, err
	}
	in.admin = c
	return c, nil
}

// closeAdmin closes the admin connection, if any.
func (in *chaosInjector) closeAdmin() {
	if in.admin == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), chaosAdminTimeout)
	defer cancel()
	_ = in.admin.Close(ctx)
	in.admin = nil
}

// chaosPause waits d, or until ctx ends. It paces load; it never orders
// anything a test asserts.
func chaosPause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
