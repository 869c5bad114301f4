package acquire

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// poolFunc is a fake [Pool]: it acquires by calling itself.
type poolFunc func(ctx context.Context) (*pgxpool.Conn, error)

func (f poolFunc) Acquire(ctx context.Context) (*pgxpool.Conn, error) { return f(ctx) }

// bubbleClock is the time of a synctest bubble: fake, and advanced only
// when every goroutine of the bubble waits.
type bubbleClock struct{}

func (bubbleClock) Now() time.Time { return time.Now() }

// theConn stands for the connection a fake pool hands out.
var theConn = new(pgxpool.Conn)

// connAfter hands out theConn after d, or fails with ctx's error if ctx
// ends first, as pgxpool does.
func connAfter(d time.Duration) func(ctx context.Context) (*pgxpool.Conn, error) {
	return func(ctx context.Context) (*pgxpool.Conn, error) {
		select {
		case <-time.After(d):
			return theConn, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// TestAcquire covers the decisions of one bounded acquire: which context
// bounds the wait (the caller's as it is, or an acquire context when the
// acquire timeout comes first), which error says who ended it, and what is
// counted.
func TestAcquire(t *testing.T) {
	errPool := errors.New("pool failed")
	never := connAfter(time.Hour)
	tests := []struct {
		name    string
		timeout time.Duration
		// deadline is the caller's, from the start; 0: none.
		deadline time.Duration
		// cancelAfter cancels the caller's context; 0: never.
		cancelAfter time.Duration
		acquire     func(ctx context.Context) (*pgxpool.Conn, error)

		wantConn     bool
		wantErr      error // nil: none; else matched with errors.Is
		wantWaited   time.Duration
		wantTimeouts int64
		// wantCallers says the pool got the caller's context as it is, not
		// an acquire context.
		wantCallers bool
	}{
		{name: "connection before the timeout", timeout: time.Second, acquire: connAfter(100 * time.Millisecond),
			wantConn: true, wantWaited: 100 * time.Millisecond},
		{name: "pool fails", timeout: time.Second, acquire: func(context.Context) (*pgxpool.Conn, error) { return nil, errPool },
			wantErr: errPool},
		{name: "acquire timeout, caller without deadline", timeout: time.Second, acquire: never,
			wantErr: ErrTimeout, wantWaited: time.Second, wantTimeouts: 1},
		{name: "acquire timeout, caller's deadline later", timeout: time.Second, deadline: 5 * time.Second, acquire: never,
			wantErr: ErrTimeout, wantWaited: time.Second, wantTimeouts: 1},
		{name: "caller's deadline first: its context as it is", timeout: time.Second, deadline: 500 * time.Millisecond, acquire: never,
			wantErr: context.DeadlineExceeded, wantWaited: 500 * time.Millisecond, wantCallers: true},
		{name: "caller's deadline at the timeout: its context as it is", timeout: time.Second, deadline: time.Second, acquire: never,
			wantErr: context.DeadlineExceeded, wantWaited: time.Second, wantCallers: true},
		{name: "caller cancels first", timeout: time.Second, cancelAfter: 300 * time.Millisecond, acquire: never,
			wantErr: context.Canceled, wantWaited: 300 * time.Millisecond},
		{name: "no acquire timeout: the caller's context as it is", deadline: 3 * time.Second, acquire: never,
			wantErr: context.DeadlineExceeded, wantWaited: 3 * time.Second, wantCallers: true},
		{name: "a connection handed out as the timeout passes is kept", timeout: time.Second,
			acquire: func(ctx context.Context) (*pgxpool.Conn, error) {
				<-ctx.Done()
				return theConn, nil
			},
			wantConn: true, wantWaited: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var q Queue
				q.Init(Bounds{Timeout: tt.timeout})
				ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
				t.Cleanup(cancel)
				if tt.deadline > 0 {
					var cancelDeadline context.CancelFunc
					ctx, cancelDeadline = context.WithTimeout(ctx, tt.deadline)
					t.Cleanup(cancelDeadline)
				}
				if tt.cancelAfter > 0 {
					time.AfterFunc(tt.cancelAfter, cancel)
				}
				var gotCallers bool
				pool := poolFunc(func(actx context.Context) (*pgxpool.Conn, error) {
					gotCallers = actx == ctx
					if v := actx.Value(ctxKey{}); v != "v" {
						t.Errorf("the pool's context carries %v, want the caller's value", v)
					}
					return tt.acquire(actx)
				})
				start := time.Now()
				conn, end, waited, err := q.Acquire(ctx, pool, bubbleClock{})
				if (conn != nil) != tt.wantConn {
					t.Errorf("conn = %v, want one: %v", conn, tt.wantConn)
				}
				if tt.wantErr == nil && err != nil || !errors.Is(err, tt.wantErr) {
					t.Errorf("err = %v, want %v", err, tt.wantErr)
				}
				if tt.wantErr == ErrTimeout && errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("the acquire timeout matches context.DeadlineExceeded, the caller's own deadline")
				}
				if waited != tt.wantWaited || !end.Equal(start.Add(tt.wantWaited)) {
					t.Errorf("waited %v, ended at +%v; want %v", waited, end.Sub(start), tt.wantWaited)
				}
				if gotCallers != tt.wantCallers {
					t.Errorf("pool got the caller's context: %v, want %v", gotCallers, tt.wantCallers)
				}
				if c := q.Counts(); c != (Counts{Timeouts: tt.wantTimeouts}) {
					t.Errorf("Counts() = %+v, want %d timeouts only", c, tt.wantTimeouts)
				}
			})
		})
	}
}

// TestAcquireMaxWaiters: with MaxWaiters callers waiting, the next is
// refused at once with ErrFull, counted, and given no time; a place is
// free again once a waiter is done. 0 bounds nothing.
func TestAcquireMaxWaiters(t *testing.T) {
	tests := []struct {
		name        string
		maxWaiters  int
		callers     int
		wantRefused int
	}{
		{"unbounded", 0, 10, 0},
		{"negative is unbounded", -1, 10, 0},
		{"one", 1, 10, 9},
		{"two", 2, 10, 8},
		{"as many as the callers", 10, 10, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var q Queue
				q.Init(Bounds{Timeout: time.Second, MaxWaiters: tt.maxWaiters})
				release := make(chan struct{})
				pool := poolFunc(func(ctx context.Context) (*pgxpool.Conn, error) {
					<-release
					return theConn, nil
				})
				var refused atomic.Int64
				var wg sync.WaitGroup
				for range tt.callers {
					wg.Go(func() {
						conn, end, waited, err := q.Acquire(context.Background(), pool, bubbleClock{})
						if err == ErrFull {
							refused.Add(1)
							if conn != nil || !end.IsZero() || waited != 0 {
								t.Errorf("refused with %v, %v, %v: want nothing", conn, end, waited)
							}
						}
					})
				}
				synctest.Wait() // the waiters are in the pool, the others refused
				if got := int(refused.Load()); got != tt.wantRefused {
					t.Errorf("refused %d of %d, want %d", got, tt.callers, tt.wantRefused)
				}
				if got := q.Counts().Full; got != int64(tt.wantRefused) {
					t.Errorf("Counts().Full = %d, want %d", got, tt.wantRefused)
				}
				close(release)
				wg.Wait()
				if _, _, _, err := q.Acquire(context.Background(), pool, bubbleClock{}); err != nil {
					t.Errorf("after the waiters: %v, want a place", err)
				}
			})
		})
	}
}

// gateClock widens the window between a caller's admission and its wait:
// Now holds each caller until three are inside it (or 200ms pass), so that
// callers admitted by a check-then-act race are all let in together.
type gateClock struct {
	arrived atomic.Int64
	open    chan struct{}
	once    sync.Once
}

func (c *gateClock) Now() time.Time {
	if c.arrived.Add(1) == 3 {
		c.once.Do(func() { close(c.open) })
	}
	t := time.NewTimer(200 * time.Millisecond)
	defer t.Stop()
	select {
	case <-c.open:
	case <-t.C:
	}
	return time.Now()
}

// TestMaxWaitersReservesBeforeWaiting: 32 callers at once, MaxWaiters 2, no
// connection to be had: exactly 30 are refused with ErrFull. The bound is a
// reservation made before waiting, not a count read and acted on later.
func TestMaxWaitersReservesBeforeWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const callers, maxWaiters = 32, 2
		var q Queue
		q.Init(Bounds{Timeout: 300 * time.Millisecond, MaxWaiters: maxWaiters})
		clk := &gateClock{open: make(chan struct{})}
		var refused, timedOut atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range callers {
			wg.Go(func() {
				<-start
				_, _, _, err := q.Acquire(context.Background(), poolFunc(connAfter(time.Hour)), clk)
				switch err {
				case ErrFull:
					refused.Add(1)
				case ErrTimeout:
					timedOut.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if got := refused.Load(); got != callers-maxWaiters {
			t.Errorf("refused %d of %d callers, want %d: more than MaxWaiters (%d) waited", got, callers, callers-maxWaiters, maxWaiters)
		}
		if got := timedOut.Load(); got != maxWaiters {
			t.Errorf("%d callers timed out, want the %d that waited", got, maxWaiters)
		}
		if c := q.Counts(); c.Full != callers-maxWaiters || c.Timeouts != maxWaiters {
			t.Errorf("Counts() = %+v, want %d full and %d timeouts", c, callers-maxWaiters, maxWaiters)
		}
	})
}
