package slotlimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// refusal is the server's answer to a connect beyond its slots.
var refusal = &pgconn.PgError{Severity: "FATAL", Code: "53300", Message: "sorry, too many clients already"}

// conn is a fake pool's connection.
type conn struct{ id int }

// fakePool models pgxpool over a server of a few slots: an acquire takes an
// idle connection, or connects when the pool is below max (through the
// limit's BeforeConnect and AfterConnect steps), or waits for a release
// when it is at max. The server refuses a connect beyond its slots.
type fakePool struct {
	mu         sync.Mutex
	max        int
	server     *fakeServer
	idle       []conn
	total      int
	connecting int
	next       int
	freed      chan struct{} // closed at the next release
	limit      *Limit
	// connectTime is how long a connect's round trips take (1ms when 0).
	connectTime time.Duration
	// attempts counts the connects the pool started, those the limit's
	// steps turned back included.
	attempts int
}

// fakeServer is the slots a fleet of fake pools shares.
type fakeServer struct {
	mu       sync.Mutex
	free     int
	connects int // connects that reached it
	refused  int
}

// take takes a slot, or counts a refusal.
func (s *fakeServer) take() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.connects++
	if s.free == 0 {
		s.refused++
		return false
	}
	s.free--
	return true
}

func (s *fakeServer) counts() (connects, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connects, s.refused
}

func newFakePool(max int, server *fakeServer) *fakePool {
	return newFakePoolGrowing(max, server, false)
}

// newFakePoolGrowing returns a fakePool whose limit, when grow, adds its
// connections in the background for the acquires marked with WaitsKey
// (Settings.Grow), as pgtx's pool does.
func newFakePoolGrowing(max int, server *fakeServer, grow bool) *fakePool {
	p := &fakePool{max: max, server: server, freed: make(chan struct{})}
	s := Settings{Max: max, Stat: p.stat, Every: time.Second, Jitter: func() float64 { return 0.5 }, Now: time.Now}
	if grow {
		s.Grow = func(ctx context.Context) error {
			p.mu.Lock()
			full, idle := p.total >= p.max, len(p.idle) > 0
			p.mu.Unlock()
			if full || idle {
				return nil
			}
			c, err := p.Acquire(ctx)
			if err == nil {
				p.release(c)
			}
			return err
		}
	}
	if grow {
		s.Idle = func() int {
			p.mu.Lock()
			defer p.mu.Unlock()
			return len(p.idle)
		}
	}
	p.limit = New(s)
	return p
}

// setConnectTime sets the time of the connects that start from now on.
func (p *fakePool) setConnectTime(d time.Duration) {
	p.mu.Lock()
	p.connectTime = d
	p.mu.Unlock()
}

func (p *fakePool) stat() (total, connecting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total, p.connecting
}

func (p *fakePool) Acquire(ctx context.Context) (conn, error) {
	for {
		p.mu.Lock()
		if n := len(p.idle); n > 0 {
			c := p.idle[n-1]
			p.idle = p.idle[:n-1]
			p.mu.Unlock()
			p.limit.Acquired()
			return c, nil
		}
		if p.total < p.max {
			p.total++
			p.connecting++
			p.attempts++
			p.mu.Unlock()
			c, err := p.connect(ctx)
			if err == nil {
				p.limit.Acquired()
			}
			return c, err
		}
		freed := p.freed
		p.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return conn{}, ctx.Err()
		}
	}
}

// connect runs the limit's steps around a connect to the server.
func (p *fakePool) connect(ctx context.Context) (conn, error) {
	fail := func(err error) (conn, error) {
		p.mu.Lock()
		p.total--
		p.connecting--
		p.mu.Unlock()
		return conn{}, err
	}
	if err := p.limit.Connecting(ctx); err != nil {
		return fail(err)
	}
	p.mu.Lock()
	d := max(p.connectTime, time.Millisecond)
	p.mu.Unlock()
	select { // the connect's round trips; the acquire gives up at ctx's end
	case <-time.After(d):
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	if !p.server.take() {
		return fail(fmt.Errorf("failed to connect: %w", refusal))
	}
	p.mu.Lock()
	p.next++
	p.connecting--
	c := conn{id: p.next}
	p.mu.Unlock()
	p.limit.Connected(ctx)
	return c, nil
}

// release gives c back, telling the limit first, as pgxpool's release
// tracer does, and after, as pgtx's own releases do.
func (p *fakePool) release(c conn) {
	p.limit.Released()
	p.mu.Lock()
	p.idle = append(p.idle, c)
	close(p.freed)
	p.freed = make(chan struct{})
	p.mu.Unlock()
	p.limit.Back()
}

// refusingPool returns a refusal from every acquire; held is what it holds.
type refusingPool struct{ err error }

func (p refusingPool) Acquire(context.Context) (conn, error) { return conn{}, p.err }

// hold acquires n connections of p and returns them.
func hold(t *testing.T, p *fakePool, n int) []conn {
	t.Helper()
	var cs []conn
	for range n {
		c, err := Acquire[conn](t.Context(), p.limit, p)
		if err != nil {
			t.Fatalf("acquire %d: %v", len(cs)+1, err)
		}
		cs = append(cs, c)
	}
	return cs
}

// TestRefusedWaitsForHeld: a connect refused for lack of slots while the
// pool holds connections is not the caller's error: it waits for one of
// them, and the pool stops growing at what it holds.
func TestRefusedWaitsForHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server := &fakeServer{free: 2}
		p := newFakePool(4, server)
		held := hold(t, p, 2)
		type result struct {
			c   conn
			err error
		}
		got := make(chan result, 1)
		go func() {
			c, err := Acquire[conn](t.Context(), p.limit, p)
			got <- result{c, err}
		}()
		time.Sleep(10 * time.Millisecond) // past the connect's round trip
		synctest.Wait()                   // refused, and waiting
		select {
		case r := <-got:
			t.Fatalf("acquire returned %v, %v before any release, want it waiting", r.c, r.err)
		default:
		}
		time.Sleep(50 * time.Millisecond)
		p.release(held[1])
		r := <-got
		if r.err != nil || r.c != held[1] {
			t.Fatalf("acquire = %v, %v, want the released %v", r.c, r.err, held[1])
		}
		s := p.limit.Stats()
		if s.Refused != 1 || s.Limit != 2 || s.Waits != 1 || s.WaitTime < 49*time.Millisecond {
			t.Errorf("stats %+v, want 1 refused, limit 2, 1 wait of about 50ms", s)
		}
		// The pool no longer tries the server while it holds its limit.
		done := make(chan error, 1)
		go func() {
			_, err := Acquire[conn](t.Context(), p.limit, p)
			done <- err
		}()
		time.Sleep(50 * time.Millisecond) // before the next probe (125ms after the refusal)
		synctest.Wait()
		if _, refused := server.counts(); refused != 1 {
			t.Errorf("%d refusals, want the one: the limit let a connect through", refused)
		}
		p.release(held[0])
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// TestRefusedHoldingNothing: a pool that holds no connection gets the
// refusal back, to back off from, and its limit stays.
func TestRefusedHoldingNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server := &fakeServer{free: 0}
		p := newFakePool(4, server)
		_, err := Acquire[conn](t.Context(), p.limit, p)
		if !errors.Is(err, refusal) {
			t.Fatalf("err = %v, want the refusal", err)
		}
		if s := p.limit.Stats(); s.Refused != 1 || s.Limit != 4 {
			t.Errorf("stats %+v, want 1 refused, limit 4 (MaxConns)", s)
		}
		if err := p.limit.Connecting(t.Context()); err != nil {
			t.Errorf("Connecting = %v, want nil: a pool holding nothing is not held back", err)
		}
	})
}

// TestProbeRaisesLimit: about once per Every the limit lets one connect
// beyond it through; one that connects raises it, up to Max, where the
// limit is off again.
func TestProbeRaisesLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server := &fakeServer{free: 1}
		p := newFakePool(3, server)
		held := hold(t, p, 1)
		_ = held
		// Two waiters: the first is refused and caps the pool at 1.
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				c, err := Acquire[conn](t.Context(), p.limit, p)
				if err == nil {
					defer p.release(c)
				}
				errs <- err
			}()
		}
		time.Sleep(10 * time.Millisecond) // past the connects' round trips
		synctest.Wait()
		if s := p.limit.Stats(); s.Limit != 1 || s.Refused < 1 {
			t.Fatalf("stats %+v, want limit 1 after a refusal", s)
		}
		p.mu.Lock()
		p.total++ // a connect beyond the limit, as pgxpool counts it
		p.mu.Unlock()
		if err := p.limit.Connecting(t.Context()); !errors.Is(err, ErrNoSlot) {
			t.Errorf("Connecting before the probe is due = %v, want ErrNoSlot", err)
		}
		p.mu.Lock()
		p.total--
		p.mu.Unlock()
		server.mu.Lock()
		server.free = 2 // slots free up elsewhere
		server.mu.Unlock()
		time.Sleep(1100 * time.Millisecond) // jitter 0.5: the probe is due 1s after the refusal; the first waiter polls
		synctest.Wait()
		s := p.limit.Stats()
		if s.Probes < 1 || s.Raised < 1 || s.Limit < 2 {
			t.Fatalf("stats %+v, want a probe that raised the limit", s)
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Second)
		p.mu.Lock()
		p.total++ // a third connection, as a probe makes
		p.mu.Unlock()
		p.limit.capped.Store(true)
		p.limit.probing.Store(time.Now().UnixNano())
		p.limit.Connected(t.Context())
		if s := p.limit.Stats(); s.Limit != 3 || p.limit.capped.Load() {
			t.Errorf("stats %+v, capped %v: want the limit back at Max (3), and off", s, p.limit.capped.Load())
		}
	})
}

// TestRefusalsPerSecond: a fleet of pools that want twice the server's
// slots, each worker running closed-loop, meets about one refusal per pool
// per second, and no acquire fails.
func TestRefusalsPerSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const pools, workers, maxConns = 8, 4, 4
		server := &fakeServer{free: pools * maxConns / 2}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed, done int
		var fleet []*fakePool
		for range pools {
			// Each pool holds a connection before the workers start: one
			// that holds none backs off (TestRefusedHoldingNothing).
			p := newFakePool(maxConns, server)
			p.release(hold(t, p, 1)[0])
			fleet = append(fleet, p)
		}
		for _, p := range fleet {
			for range workers {
				wg.Go(func() {
					for ctx.Err() == nil {
						actx, stop := context.WithTimeout(ctx, 2*time.Second)
						c, err := Acquire[conn](actx, p.limit, p)
						stop()
						if ctx.Err() != nil {
							if err == nil {
								p.release(c)
							}
							return
						}
						mu.Lock()
						if err != nil {
							if failed == 0 {
								t.Logf("first failure: %v", err)
							}
							failed++
						} else {
							done++
						}
						mu.Unlock()
						if err == nil {
							time.Sleep(5 * time.Millisecond) // the transaction
							p.release(c)
						}
					}
				})
			}
		}
		wg.Wait()
		_, refused := server.counts()
		t.Logf("%d acquires, %d failed, %d refusals in 20s for %d pools", done, failed, refused, pools)
		if failed > 0 {
			t.Errorf("%d acquires failed, want none", failed)
		}
		// At most one per probe: after the first few (125ms, 250ms, 500ms
		// apart), one per second; and one at the start.
		if limit := pools * (20 + 4); refused > limit {
			t.Errorf("%d refusals, want at most %d (one per pool per second)", refused, limit)
		}
	})
}

// TestWaitEndsWithContext: a wait for a held connection ends with the
// caller's context, with its error.
func TestWaitEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server := &fakeServer{free: 1}
		p := newFakePool(2, server)
		hold(t, p, 1)
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		_, err := Acquire[conn](ctx, p.limit, p)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the deadline's", err)
		}
		if s := p.limit.Stats(); s.Waits != 1 || s.WaitTime < 299*time.Millisecond {
			t.Errorf("stats %+v, want 1 wait of about 300ms", s)
		}
	})
}

// TestOtherErrorsPass: an error that is not a refusal for lack of slots is
// returned as it is, and nothing is learned from it.
func TestOtherErrorsPass(t *testing.T) {
	for _, err := range []error{
		errors.New("dial tcp: connection refused"),
		&pgconn.PgError{Code: "28P01", Message: "password authentication failed"},
		&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"},
		context.DeadlineExceeded,
	} {
		l := New(Settings{Max: 4, Stat: func() (int, int) { return 2, 0 }, Every: time.Second, Now: time.Now})
		_, got := Acquire[conn](t.Context(), l, refusingPool{err})
		if got != err {
			t.Errorf("%v: got %v, want it unchanged", err, got)
		}
		if s := l.Stats(); s.Refused != 0 || s.Limit != 4 || s.Waits != 0 {
			t.Errorf("%v: stats %+v, want nothing learned", err, s)
		}
	}
}

// TestFleetStartsInTurns: pools that start together, each wanting more
// connections than its share of the server's slots, take the slots in
// turns: every pool gets a connection, and no acquire fails. Without the
// pacing, the first pools would take every slot and the others, holding
// none, would fail.
func TestFleetStartsInTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const pools, workers, maxConns = 8, 4, 4
		server := &fakeServer{free: 12}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed int
		var fleet []*fakePool
		for range pools {
			p := newFakePool(maxConns, server)
			fleet = append(fleet, p)
			for range workers {
				wg.Go(func() {
					for ctx.Err() == nil {
						c, err := Acquire[conn](ctx, p.limit, p)
						if err != nil {
							if ctx.Err() == nil {
								mu.Lock()
								failed++
								mu.Unlock()
							}
							continue
						}
						time.Sleep(5 * time.Millisecond)
						p.release(c)
					}
				})
			}
		}
		wg.Wait()
		if failed > 0 {
			t.Errorf("%d acquires failed, want none", failed)
		}
		for i, p := range fleet {
			if total, _ := p.stat(); total < 1 {
				t.Errorf("pool %d holds no connection", i)
			}
		}
	})
}

// TestPacerRamp: a pool connects one at a time until it holds two
// connections, then up to half as many at once as it holds.
func TestPacerRamp(t *testing.T) {
	for _, tc := range []struct {
		total, connecting, blocked int
		want                       bool
	}{
		{total: 1, connecting: 1, want: true},                 // the first connect
		{total: 2, connecting: 2, want: false},                // a second while the first connects
		{total: 3, connecting: 3, blocked: 1, want: false},    // one connects, one waits here
		{total: 3, connecting: 1, want: true},                 // 2 held: 1 at a time
		{total: 4, connecting: 2, want: false},                //
		{total: 6, connecting: 2, want: true},                 // 4 held: 2 at once
		{total: 7, connecting: 3, want: false},                //
		{total: 14, connecting: 4, want: true},                // 10 held: 5 at once
		{total: 14, connecting: 6, blocked: 2, want: true},    // 2 of the 6 wait here
		{total: 14, connecting: 6, blocked: 1, want: false},   //
		{total: 100, connecting: 50, blocked: 40, want: true}, // 50 held: 25 at once, 10 in flight
	} {
		p := &pacer{blocked: tc.blocked}
		ctx, cancel := context.WithCancel(t.Context())
		cancel() // a wait returns ctx's error at once
		err := p.wait(ctx, func() (int, int) { return tc.total, tc.connecting }, false)
		if got := err == nil; got != tc.want {
			t.Errorf("%d held, %d connecting (%d waiting): went %v, want %v", tc.total, tc.connecting, tc.blocked, got, tc.want)
		}
		if p.blocked != tc.blocked {
			t.Errorf("%d held, %d connecting: %d waiting after, want %d", tc.total, tc.connecting, p.blocked, tc.blocked)
		}
	}
}

// TestProbeBacksOff: after the limit drops, the next try beyond it comes
// after Every/8, and the delay doubles with each refusal up to Every; a
// try that raises the limit makes the next one come soon again.
func TestProbeBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		held := 2
		l := New(Settings{Max: 4, Stat: func() (int, int) { return held, 0 }, Every: time.Second,
			Jitter: func() float64 { return 0.5 }, Now: time.Now})
		due := func() time.Duration { return time.Duration(l.probeAt.Load() - time.Now().UnixNano()) }
		var got []time.Duration
		for range 6 {
			l.refuse(t.Context(), held, refusal)
			got = append(got, due())
		}
		want := []time.Duration{125 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, time.Second, time.Second}
		if !slices.Equal(got, want) {
			t.Errorf("delays %v, want %v", got, want)
		}
		held = 3 // a probe connected
		l.Connected(t.Context())
		if d := due(); d != 125*time.Millisecond || l.Stats().Limit != 3 {
			t.Errorf("after a raise: next try in %v, limit %d; want 125ms, 3", d, l.Stats().Limit)
		}
		l.ProbeSoon()
		if d := due(); d != 0 {
			t.Errorf("after ProbeSoon: next try in %v, want now", d)
		}
	})
}

// TestPacerWaitsAtMostPaceMax: a connect in flight that hangs holds the
// pool's next connect back paceMax at most.
func TestPacerWaitsAtMostPaceMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p pacer
		start := time.Now()
		// One connect in flight that never ends, and this one.
		if err := p.wait(t.Context(), func() (int, int) { return 2, 2 }, false); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != paceMax {
			t.Errorf("waited %v, want paceMax (%v)", waited, paceMax)
		}
		if p.blocked != 0 {
			t.Errorf("%d connects counted waiting after, want 0", p.blocked)
		}
	})
}
