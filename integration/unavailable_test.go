package integration

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// TestNoServerIsNamedForWhatItIs: a connection string that names a socket
// file that does not exist (what a missing DATABASE_URL leads to) fails at
// once as permanent, without backoff; a port nobody listens on is an
// unavailable server, backed off as the Client Backpressure specification says and named as such, never
// "overload".
func TestNoServerIsNamedForWhatItIs(t *testing.T) {
	ctx := testCtx(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: connections are refused
	tests := []struct {
		name         string
		dsn          string
		wantClass    pgtx.Class
		wantAttempts string
		wantText     string
	}{
		{"no such socket file", "postgres://app@/app?host=" + filepath.Join(t.TempDir(), "no-server-here"), pgtx.ClassPermanent, "[permanent]", "no such file or directory"},
		{"connection refused", "postgres://app@" + closedPort + "/app?sslmode=disable", pgtx.ClassUnavailable, "[unavailable unavailable unavailable]", "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &bouncerTracer{}
			pool := newPool(t, tt.dsn, func(c *pgtx.Config) { c.Tracer = tr; c.CancelMode = pgtx.CancelModeProtocol })
			start := time.Now()
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
			elapsed := time.Since(start)
			classes, backoffs := tr.snapshot()
			t.Logf("after %v: %v; attempts %s, backoffs %s", elapsed.Round(time.Millisecond), err, classes, backoffs)
			if got := pgtx.Classify(err); got != tt.wantClass || classes != tt.wantAttempts {
				t.Errorf("class %v, attempts %s; want %v, %s", got, classes, tt.wantClass, tt.wantAttempts)
			}
			if !strings.Contains(err.Error(), tt.wantText) || strings.Contains(err.Error(), "overload") {
				t.Errorf("err = %v: want it to say %q, and not overload", err, tt.wantText)
			}
			if tt.wantClass == pgtx.ClassPermanent && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("err = %v: the missing socket must stay reachable", err)
			}
		})
	}
}
