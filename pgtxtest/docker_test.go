package pgtxtest

import (
	"context"
	"errors"
	"testing"
	"time"
)

// On a machine without a Docker daemon the ping fails fast; where one runs, it answers.
// Either way it returns within its bound.
func TestDockerPingIsBounded(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), dockerPingTimeout)
	defer cancel()
	start := time.Now()
	err := dockerPing(ctx)
	took := time.Since(start)
	t.Logf("docker ping: %v after %v", err, took)
	if took > dockerPingTimeout+time.Second {
		t.Errorf("docker ping took %v, bound %v", took, dockerPingTimeout)
	}
}

// Docker is chosen only when its ping answers, and only if no env DSN is set.
func TestDockerDecision(t *testing.T) {
	t.Parallel()
	errRefused := errors.New("connection refused")
	tests := []struct {
		name     string
		env      map[string]string
		ping     error
		want     string
		wantPing bool
	}{
		{name: "ping answers", ping: nil, want: KindDocker, wantPing: true},
		{name: "ping fails", ping: errRefused, want: KindLocal, wantPing: true},
		{name: "ping times out", ping: context.DeadlineExceeded, want: KindLocal, wantPing: true},
		{name: "env DSN set: no ping", env: map[string]string{"DATABASE_URL": "postgres://x@h/db"}, want: KindEnv},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pinged := false
			p := choose(context.Background(), probe{
				getenv:      fakeEnv(tc.env),
				dockerPing:  func(context.Context) error { pinged = true; return tc.ping },
				pingTimeout: time.Second,
				findBindir:  func() (string, error) { return "/bin", nil },
			})
			if p.kind != tc.want || pinged != tc.wantPing {
				t.Errorf("kind %q, pinged %v; want %q, %v", p.kind, pinged, tc.want, tc.wantPing)
			}
		})
	}
}
