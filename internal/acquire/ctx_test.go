package acquire

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// ctxKey is the key of a caller's value that acquire contexts must carry.
type ctxKey struct{}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestAcquireCtx checks the reusable acquire context against what a
// context.WithTimeout of the caller's context would do: it ends at the
// acquire timeout or when the caller's context ends, whichever is first,
// says which, carries the caller's values, and is never handed out again
// once it has ended.
func TestAcquireCtx(t *testing.T) {
	const timeout = 2 * time.Second
	cancellable := func(t *testing.T) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
		t.Cleanup(cancel)
		return ctx, cancel
	}
	tests := []struct {
		name string
		// run ends (or not) the context c of parent and returns what Err
		// must then be.
		run     func(t *testing.T, c *acquireCtx, cancelParent context.CancelFunc) error
		ended   int32
		reusing bool // put keeps c for the next get
	}{
		{
			name: "not ended: live, kept for reuse",
			run: func(*testing.T, *acquireCtx, context.CancelFunc) error {
				time.Sleep(timeout - time.Millisecond)
				return nil
			},
			ended:   endedNot,
			reusing: true,
		},
		{
			name: "acquire timeout passes",
			run: func(*testing.T, *acquireCtx, context.CancelFunc) error {
				time.Sleep(timeout)
				return context.DeadlineExceeded
			},
			ended: endedTimeout,
		},
		{
			name: "caller's context cancelled first",
			run: func(_ *testing.T, _ *acquireCtx, cancel context.CancelFunc) error {
				time.Sleep(timeout / 2)
				cancel()
				time.Sleep(timeout) // the timer, stopped or not, must not close done twice
				return context.Canceled
			},
			ended: endedParent,
		},
	}
	for _, tt := range tests {
		for _, parentKind := range []string{"cancellable", "background"} {
			if parentKind == "background" && tt.ended == endedParent {
				continue // a context that cannot be cancelled does not end
			}
			t.Run(tt.name+"/"+parentKind, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var ap acquireCtxPool
					parent, cancel := cancellable(t)
					if parentKind == "background" {
						parent, cancel = context.WithValue(context.Background(), ctxKey{}, "v"), func() {}
					}
					start := time.Now()
					c := ap.get(parent, timeout)
					if d, ok := c.Deadline(); !ok || !d.Equal(start.Add(timeout)) {
						t.Errorf("Deadline() = %v, %v; want %v, true", d, ok, start.Add(timeout))
					}
					if got := c.Value(ctxKey{}); got != "v" {
						t.Errorf("Value = %v, want the caller's value", got)
					}
					want := tt.run(t, c, cancel)
					synctest.Wait()
					if got := c.Err(); !errors.Is(got, want) || (want == nil) != (got == nil) {
						t.Errorf("Err() = %v, want %v", got, want)
					}
					if isClosed(c.Done()) != (want != nil) {
						t.Errorf("Done closed = %v, want %v", isClosed(c.Done()), want != nil)
					}
					if got := c.ended.Load(); got != tt.ended {
						t.Errorf("ended = %d, want %d", got, tt.ended)
					}
					ap.put(c)
					fresh, _ := cancellable(t)
					next := ap.get(fresh, timeout)
					defer ap.put(next)
					if !tt.reusing && next == c {
						t.Fatal("an ended acquire context was handed out again")
					}
					if next.Err() != nil || isClosed(next.Done()) {
						t.Fatalf("the next acquire context is not live: Err() = %v", next.Err())
					}
					// The next one, reused or new, has its own full timeout.
					time.Sleep(timeout - time.Millisecond)
					synctest.Wait()
					if next.Err() != nil {
						t.Fatalf("next ended early: %v", next.Err())
					}
					time.Sleep(time.Millisecond)
					synctest.Wait()
					if !errors.Is(next.Err(), context.DeadlineExceeded) || next.ended.Load() != endedTimeout {
						t.Fatalf("next did not end at its timeout: Err() = %v", next.Err())
					}
				})
			})
		}
	}
}

// TestAcquireCtxDoesNotOutliveItsUse: once put back, a reused context no
// longer follows its old caller: cancelling that caller later ends nothing.
func TestAcquireCtxDoesNotOutliveItsUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ap acquireCtxPool
		old, cancelOld := context.WithCancel(context.Background())
		c := ap.get(old, time.Second)
		ap.put(c)
		next := ap.get(context.Background(), time.Second)
		defer ap.put(next)
		cancelOld()
		synctest.Wait()
		if next.Err() != nil {
			t.Fatalf("cancelling an earlier caller ended a later acquire: %v", next.Err())
		}
	})
}

// TestAcquireCtxSharedIsNotReused: a context handed to code that may keep
// it (a connect, a caller's hook) is never handed out again, and keeps its
// caller's values for whoever still holds it.
func TestAcquireCtxSharedIsNotReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ap acquireCtxPool
		parent := context.WithValue(context.Background(), ctxKey{}, "v")
		c := ap.get(parent, time.Second)
		derived := context.WithValue(c, ctxKey{}, "derived") // as a hook would see it
		MarkShared(derived)
		ap.put(c)
		next := ap.get(context.Background(), time.Second)
		defer ap.put(next)
		if next == c {
			t.Fatal("a shared acquire context was handed out again")
		}
		if got := c.Value(ctxKey{}); got != "v" {
			t.Errorf("the shared context's Value = %v, want the caller's value still", got)
		}
		MarkShared(context.Background()) // not an acquire context: nothing to mark, no panic
	})
}
