package proc

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestLaunch runs a real program: one that becomes ready is returned with
// where its lines begin in the log; one that does not is stopped, and the
// error carries its log's tail, and ErrPortTaken when the log says the
// port is held.
func TestLaunch(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		name      string
		says      string
		ready     bool
		portTaken bool
	}{
		{"ready", "up", true, false},
		{"not ready", "no luck", false, false},
		{"port taken", "could not bind: Address already in use", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "prog.log")
			l := Launch{Name: "prog", Port: 5999, Log: log, Cmd: exec.Command("sh", "-c", "echo \"$0\"; exec sleep 60", tt.says), Group: true}
			errNotReady := errors.New("not ready")
			var stopped bool
			l.Ready = func(ctx context.Context, p *Process, from int64) error {
				if from != 0 {
					t.Errorf("a new log's lines begin at %d, want 0", from)
				}
				for !strings.Contains(Tail(log, from, 100), "\n") {
					select {
					case <-p.Done:
						return errors.New("exited")
					case <-time.After(time.Millisecond):
					}
				}
				if !tt.ready {
					return errNotReady
				}
				return nil
			}
			l.Stop = func(p *Process) error {
				stopped = true
				return p.Stop("prog", syscall.SIGTERM, time.Second)
			}
			p, from, err := l.Run(context.Background())
			switch {
			case tt.ready && err != nil:
				t.Fatalf("Run: %v", err)
			case tt.ready:
				if from != 0 || stopped {
					t.Errorf("ready: from %d, stopped %v", from, stopped)
				}
				if err := p.Stop("prog", syscall.SIGTERM, time.Second); err != nil {
					t.Error(err)
				}
				return
			case err == nil:
				t.Fatal("Run of a program that is not ready succeeded")
			}
			if !stopped || !errors.Is(err, errNotReady) || !strings.Contains(err.Error(), "prog on port 5999 did not start") ||
				!strings.HasSuffix(err.Error(), "prog log:\n"+tt.says+"\n") {
				t.Errorf("stopped %v, error %q", stopped, err)
			}
			if got := errors.Is(err, ErrPortTaken); got != tt.portTaken {
				t.Errorf("errors.Is(err, ErrPortTaken) = %v, want %v", got, tt.portTaken)
			}
		})
	}
}

// TestLaunchCannotStart: a binary that is not there is an error naming the
// program, and nothing runs.
func TestLaunchCannotStart(t *testing.T) {
	l := Launch{Name: "prog", Log: filepath.Join(t.TempDir(), "prog.log"), Cmd: exec.Command("/nonexistent/prog"),
		Ready: func(context.Context, *Process, int64) error { t.Error("Ready called"); return nil },
		Stop:  func(*Process) error { t.Error("Stop called"); return nil }}
	if _, _, err := l.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "start prog") {
		t.Errorf("Run: %v", err)
	}
}
