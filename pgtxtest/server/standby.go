package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/pgbin"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// Bounds of a standby's steps.
const (
	basebackupTimeout = 2 * time.Minute  // pg_basebackup of the primary
	promoteTimeout    = 30 * time.Second // pg_ctl promote, until the server accepts writes
)

// NewStandby starts a hot standby of primary, a local server from [New], and
// stops it in tb.Cleanup. The standby is a fresh cluster made with pg_basebackup -R -X
// stream from the running primary (as the proc.Superuser, over 127.0.0.1), started with the
// primary's settings on a port of its own; it returns once the standby accepts
// connections and is in recovery, replaying what the primary streams to it. The
// primary must keep PostgreSQL's default wal_level (replica) and max_wal_senders
// (10), which streaming needs.
// A primary of another kind skips the test with the reason, or, as for New,
// fails it when CI=true and local binaries exist (the test could have had a local
// primary). A failure to start fails the test.
func NewStandby(tb testing.TB, primary *Server) *Server {
	tb.Helper()
	_, err := pgbin.Find()
	if fail, msg := standbyVerdict(os.Getenv, primary, err == nil); fail {
		tb.Fatal(msg)
	} else if msg != "" {
		tb.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), basebackupTimeout+proc.StartAttempts*readyTimeout)
	defer cancel()
	s, err := startStandby(ctx, primary)
	if err != nil {
		tb.Fatalf("pgtxtest: standby of the server at %s: %v", primary.Addr(), err)
	}
	tb.Cleanup(func() {
		tb.Helper() // a failure to stop is reported at the line of the call
		if err := s.Stop(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return s
}

// standbyVerdict tells whether NewStandby can make a standby of primary: only a
// local server can have one. If not, msg says why, and fail whether the test fails
// rather than being skipped: as with dedicatedVerdict, that is under CI=true when
// local binaries exist, and for a primary that is no server at all.
func standbyVerdict(getenv func(string) string, primary *Server, haveLocal bool) (fail bool, msg string) {
	switch {
	case primary == nil || primary.base == nil:
		return true, "pgtxtest: server.NewStandby needs a server from server.New as its primary"
	case primary.local != nil:
		return false, ""
	case haveLocal && proc.IsCI(getenv):
		return true, fmt.Sprintf("pgtxtest: NewStandby needs a local primary, and this one is %s; "+
			"CI=true and local binaries exist: ask New for the primary", primary.kind)
	}
	return false, fmt.Sprintf("pgtxtest: this test needs a standby, which only a local primary can have, and the primary is %s; "+
		"use New for the primary and install the PostgreSQL server package (initdb, postgres, pg_basebackup, pg_ctl)",
		primary.kind)
}

// startStandby copies the running primary with pg_basebackup into a new cluster
// directory and starts it as a hot standby.
func startStandby(ctx context.Context, primary *Server) (*Server, error) {
	primary.mu.Lock()
	p := primary.local
	running := !primary.stopped && p.proc != nil
	primaryPort := p.port
	primary.mu.Unlock()
	if !running {
		return nil, errors.New("the primary is not running")
	}

	root, err := newClusterRoot()
	if err != nil {
		return nil, err
	}
	settings := maps.Clone(p.settings)
	if settings == nil {
		settings = make(map[string]string, 1)
	}
	// A standby needs max_connections and the like at least as high as its primary's,
	// hence its settings; hot_standby is what lets it answer queries in recovery.
	settings["hot_standby"] = "on"
	c := &localCluster{bindir: p.bindir, root: root, settings: settings, cred: p.cred}
	if err := c.makeDirs(); err != nil {
		return nil, errors.Join(err, os.RemoveAll(root))
	}
	if err := c.basebackup(ctx, primaryPort); err != nil {
		return nil, errors.Join(err, os.RemoveAll(root))
	}
	if err := c.startOnFreePort(ctx); err != nil {
		return nil, errors.Join(err, os.RemoveAll(root))
	}
	if err := c.waitRecovery(ctx, true, readyTimeout); err != nil {
		return nil, errors.Join(err, c.destroy(ctx))
	}
	s := newServer(KindLocal, c.dsn())
	s.local = c
	return s, nil
}

// basebackup fills the data directory with a copy of the primary on port, with the
// WAL written meanwhile and standby.signal and primary_conninfo (-R) so that it
// starts as a standby streaming from it.
func (c *localCluster) basebackup(ctx context.Context, port int) error {
	ctx, cancel := context.WithTimeout(ctx, basebackupTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bindir, "pg_basebackup"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", proc.Superuser, "-w",
		"-D", c.dataDir(), "-R", "-X", "stream", "-c", "fast", "--no-sync")
	if out, err := c.runTool(cmd); err != nil {
		return fmt.Errorf("pgtxtest: pg_basebackup from port %d: %w\n%s", port, err, out)
	}
	return nil
}

// runTool runs one of the server's client programs as the server's user, from the
// cluster directory, and returns its output.
func (c *localCluster) runTool(cmd *exec.Cmd) ([]byte, error) {
	cmd.Dir = c.root
	cmd.Env = proc.Env()
	cmd.SysProcAttr = proc.SysProcAttr(c.cred)
	cmd.WaitDelay = proc.KillGrace
	return cmd.CombinedOutput()
}

// Promote turns a local standby into a primary with pg_ctl promote and returns once
// it accepts writes (pg_is_in_recovery() is false). It starts a new timeline; the old
// primary keeps running on its own. It returns an error for servers of other kinds,
// for one that is stopped or down, and for one that is not a standby. Promote waits at
// most 30 seconds, less if ctx ends first.
func (s *Server) Promote(ctx context.Context) error {
	if s.local == nil {
		return fmt.Errorf("pgtxtest: Promote needs a local server, this one is %q", s.kind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("pgtxtest: Promote: the server is stopped")
	}
	if err := s.local.promote(ctx); err != nil {
		return fmt.Errorf("pgtxtest: promote server at %s: %w", s.addr, err)
	}
	return nil
}

func (c *localCluster) promote(ctx context.Context) error {
	if c.proc == nil {
		return errors.New("the server is down")
	}
	ctx, cancel := context.WithTimeout(ctx, promoteTimeout)
	defer cancel()
	logStart := proc.LogSize(c.logPath())
	cmd := exec.CommandContext(ctx, filepath.Join(c.bindir, "pg_ctl"), "promote", "-w",
		"-t", strconv.Itoa(int(promoteTimeout/time.Second)), "-D", c.dataDir())
	if out, err := c.runTool(cmd); err != nil {
		return fmt.Errorf("pg_ctl promote: %w\n%s\nserver log:\n%s", err, out, proc.Tail(c.logPath(), logStart, 4096))
	}
	// pg_ctl has seen the control file say "in production"; sessions may still
	// report recovery for a moment.
	if err := c.waitRecovery(ctx, false, promoteTimeout); err != nil {
		return fmt.Errorf("%w\nserver log:\n%s", err, proc.Tail(c.logPath(), logStart, 4096))
	}
	return nil
}

// waitRecovery polls the running server until pg_is_in_recovery() is want, the
// server exits, or timeout passes.
func (c *localCluster) waitRecovery(ctx context.Context, want bool, timeout time.Duration) error {
	if c.proc == nil {
		return errors.New("the server is down")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := c.proc.WaitReady(ctx, "server", func(ctx context.Context) (bool, error) {
		got, err := inRecovery(ctx, c.dsn().String())
		switch {
		case err != nil:
			return true, err
		case got != want:
			return true, fmt.Errorf("pg_is_in_recovery() is %v", got)
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for pg_is_in_recovery() to be %v: %w", want, err)
	}
	return nil
}

// inRecovery asks the server at dsn whether it is in recovery, that is a standby.
func inRecovery(ctx context.Context, dsn string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return false, err
	}
	res := conn.ExecParams(ctx, "SELECT pg_is_in_recovery()::text", nil, nil, nil, nil).Read()
	if err := errors.Join(res.Err, conn.Close(ctx)); err != nil {
		return false, err
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		return false, fmt.Errorf("pg_is_in_recovery(): %d rows", len(res.Rows))
	}
	return string(res.Rows[0][0]) == "true", nil
}
