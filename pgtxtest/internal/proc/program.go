package proc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Program is a program a kit package starts from the machine's packages
// (pgbouncer, pgpool, pg_autoctl): where its binary is, and what a test
// does without it.
type Program struct {
	Name    string // what the messages call it: "PgBouncer"
	Binary  string // its binary, looked up in PATH: "pgbouncer"
	Env     string // the variable that names the binary's path: "PGTX_TEST_PGBOUNCER"
	Default string // where its package installs it: "/usr/sbin/pgbouncer"
	Package string // the Debian package that has it: "pgbouncer"
}

// Find returns the path of p's binary: p.Env's when set, else the one in
// PATH, else p.Default.
func (p Program) Find(getenv func(string) string) (string, error) {
	if path := getenv(p.Env); path != "" {
		if _, err := exec.LookPath(path); err != nil {
			return "", fmt.Errorf("%s=%s: %w", p.Env, path, err)
		}
		return path, nil
	}
	if path, err := exec.LookPath(p.Binary); err == nil {
		return path, nil
	}
	if _, err := exec.LookPath(p.Default); err != nil {
		return "", fmt.Errorf("%s is not in PATH or %s", p.Binary, p.Default)
	}
	return p.Default, nil
}

// Missing tells what a test does when p cannot be found (why): under
// CI=true it fails, elsewhere it is skipped; msg says how to install it.
func (p Program) Missing(getenv func(string) string, why error) (fail bool, msg string) {
	msg = fmt.Sprintf("pgtxtest: this test needs %s (%v). To run it, install it (e.g. apt-get install %s) "+
		"or set %s to the path of the %s binary.", p.Name, why, p.Package, p.Env, p.Binary)
	if IsCI(getenv) {
		return true, msg + " CI=true: a missing " + p.Name + " is a failure, not a skip."
	}
	return false, msg
}

// Need returns the path of p's binary, or ends the test when there is
// none: under CI=true a failure, elsewhere a skip that says how to install it.
func (p Program) Need(tb testing.TB) string {
	tb.Helper()
	bin, err := p.Find(os.Getenv)
	if err != nil {
		if fail, msg := p.Missing(os.Getenv, err); fail {
			tb.Fatal(msg)
		} else {
			tb.Skip(msg)
		}
	}
	return bin
}

// NeedTCP ends the test when addr, a test server's, is empty: the server is
// reached over a Unix socket and caller ("bouncer.New") needs its TCP
// address. Under CI=true that is a failure, elsewhere a skip.
func NeedTCP(tb testing.TB, addr, caller string) {
	tb.Helper()
	if addr != "" {
		return
	}
	msg := "pgtxtest: a test server is reached over a Unix socket; " + caller + " needs its TCP address"
	if IsCI(os.Getenv) {
		tb.Fatal(msg + " (CI=true: a failure, not a skip)")
	}
	tb.Skip(msg)
}

// Started runs start, bounded by bound, and stops what it started at tb's
// cleanup; an error of either fails tb.
func Started[T interface{ Stop() error }](tb testing.TB, bound time.Duration, start func(context.Context) (T, error)) T {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	v, err := start(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		tb.Helper() // a failure to stop is reported at the line of the call
		if err := v.Stop(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return v
}
