package reach

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var errRefused = errors.New("refused")

// probeAfter returns a probe that fails until up, then succeeds, counting
// its calls.
func probeAfter(up time.Time, calls *atomic.Int64) Probe {
	return func(ctx context.Context) error {
		calls.Add(1)
		if time.Now().Before(up) {
			return errRefused
		}
		return nil
	}
}

// TestSleep: how a wait ends, on synctest's clock: its time passes, a
// connect wakes it, a successful probe wakes it, its context ends it.
func TestSleep(t *testing.T) {
	tests := []struct {
		name    string
		upAfter time.Duration // when the probe starts to succeed
		connect time.Duration // when Connected is called from outside (0: never)
		cancel  time.Duration // when the context is cancelled (0: never)
		want    time.Duration // how long Sleep(5s) lasts
		wantErr error
	}{
		{"nothing happens: the whole pause", time.Hour, 0, 0, 5 * time.Second, nil},
		{"a connect of a call wakes it", time.Hour, 1200 * time.Millisecond, 0, 1200 * time.Millisecond, nil},
		{"the probe's connect wakes it within a probe's pause", 1900 * time.Millisecond, 0, 0, 2 * time.Second, nil},
		{"the context ends it", time.Hour, 0, 700 * time.Millisecond, 700 * time.Millisecond, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int64
				r := New(Settings{Probe: probeAfter(time.Now().Add(tt.upAfter), &calls), Every: 250 * time.Millisecond,
					Jitter: func() float64 { return 1 }, Timeout: time.Second})
				defer r.Close()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tt.connect > 0 {
					time.AfterFunc(tt.connect, r.Connected)
				}
				if tt.cancel > 0 {
					time.AfterFunc(tt.cancel, cancel)
				}
				start := time.Now()
				err := r.Sleep(ctx, 5*time.Second)
				if got := time.Since(start); got != tt.want || !errors.Is(err, tt.wantErr) {
					t.Errorf("Sleep lasted %v, err %v; want %v, %v", got, err, tt.want, tt.wantErr)
				}
				if n := calls.Load(); n == 0 {
					t.Errorf("no probe ran while the call waited")
				}
			})
		})
	}
}

// TestOneProbeForAllWaiters: however many calls wait, one probe connects,
// once per pause (no herd); once the server is back every call wakes at
// once, and the probe stops when no call waits any more.
func TestOneProbeForAllWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		start := time.Now()
		r := New(Settings{Probe: probeAfter(start.Add(3*time.Second), &calls), Every: 200 * time.Millisecond,
			Jitter: func() float64 { return 1 }, Timeout: time.Second})
		defer r.Close()
		var wg sync.WaitGroup
		ends := make([]time.Duration, 20)
		for i := range ends {
			wg.Go(func() {
				_ = r.Sleep(context.Background(), 10*time.Second)
				ends[i] = time.Since(start)
			})
		}
		wg.Wait()
		for i, d := range ends {
			if d != 3*time.Second {
				t.Errorf("waiter %d woke after %v, want 3s: at the probe that found the server back", i, d)
			}
		}
		if n := calls.Load(); n != 15 {
			t.Errorf("%d probes in 3s for 20 waiters, want 15: one every 200ms", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := calls.Load(); n != 15 {
			t.Errorf("%d probes, want still 15: no call waits, no probe", n)
		}
	})
}

// TestClose: Close stops a running probe; a wait after Close still ends by
// its time, its context or a connect, with no probe.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		r := New(Settings{Probe: probeAfter(time.Now().Add(time.Hour), &calls), Every: 100 * time.Millisecond, Timeout: time.Second})
		var wg sync.WaitGroup
		wg.Go(func() { _ = r.Sleep(context.Background(), 2*time.Second) })
		time.Sleep(time.Second)
		r.Close()
		before := calls.Load()
		wg.Wait()
		if before == 0 || calls.Load() != before {
			t.Errorf("probes %d before Close, %d after: want some, then none", before, calls.Load())
		}
		start := time.Now()
		time.AfterFunc(300*time.Millisecond, r.Connected)
		if err := r.Sleep(context.Background(), time.Second); err != nil || time.Since(start) != 300*time.Millisecond {
			t.Errorf("Sleep after Close: %v after %v, want woken by the connect after 300ms", err, time.Since(start))
		}
		if calls.Load() != before {
			t.Errorf("a probe ran after Close")
		}
	})
}

// TestNoProbe: without a probe, only a connect or the time ends a wait.
func TestNoProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(Settings{})
		defer r.Close()
		start := time.Now()
		if err := r.Sleep(context.Background(), time.Second); err != nil || time.Since(start) != time.Second {
			t.Errorf("Sleep: %v after %v, want nil after 1s", err, time.Since(start))
		}
		if err := r.Sleep(context.Background(), 0); err != nil {
			t.Errorf("Sleep(0) = %v", err)
		}
	})
}
