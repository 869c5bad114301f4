package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/pgbin"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// envVars are the variables that name a server, in order of precedence.
var envVars = []string{"PGTX_TEST_DATABASE_URL", "DATABASE_URL"}

// Config configures a server that [New] or [Start] starts of its own (a local
// server). The zero value, as a nil *Config, starts one with the kit's settings.
type Config struct {
	// Settings are extra server settings, passed as -c name=value and applied after the
	// harness's own, e.g. {"max_connections": "8"}. Names must be plain setting names.
	Settings map[string]string
	// OwnSystem runs initdb for this server instead of copying the harness's
	// template, so that it has a system identifier of its own. The harness's
	// servers are copies of one initdb and so, for PostgreSQL, one system (as a
	// primary and its standbys are); a test of what a client does when it reaches
	// another system needs this. It costs an initdb, about a second.
	OwnSystem bool
}

// probe is what the harness asks of the machine to choose a server. Its fields are
// seams for tests.
type probe struct {
	getenv      func(string) string
	dockerPing  func(context.Context) error
	pingTimeout time.Duration
	findBindir  func() (string, error)
}

var systemProbe = probe{
	getenv:      os.Getenv,
	dockerPing:  dockerPing,
	pingTimeout: dockerPingTimeout,
	findBindir:  pgbin.Find,
}

// plan is the choice of a server, made before starting it.
type plan struct {
	kind   string   // KindEnv, KindDocker, KindLocal, or "" when no server can be had
	envVar string   // KindEnv: the variable that names the server
	dsn    string   // KindEnv: its value
	bindir string   // KindLocal: where the server binaries are
	notes  []string // why each option before the chosen one was passed over
	forced string   // PGTX_TEST_SERVER, when set: the kind asked for, its absence a failure
}

// choose picks the server: an env DSN, else Docker if its daemon answers a ping
// within p.pingTimeout, else local binaries, else none. It asks only as much as it
// needs: with an env DSN, Docker is not pinged. PGTX_TEST_SERVER names the kind to
// use instead (chooseForced).
func choose(ctx context.Context, p probe) plan {
	if want := strings.TrimSpace(p.getenv(serverKindEnv)); want != "" {
		return chooseForced(ctx, p, want)
	}
	for _, name := range envVars {
		if dsn := strings.TrimSpace(p.getenv(name)); dsn != "" {
			return plan{kind: KindEnv, envVar: name, dsn: dsn}
		}
	}
	notes := []string{strings.Join(envVars, " and ") + " are not set"}

	pingCtx, cancel := context.WithTimeout(ctx, p.pingTimeout)
	err := p.dockerPing(pingCtx)
	cancel()
	if err == nil {
		return plan{kind: KindDocker, notes: notes}
	}
	notes = append(notes, "no Docker daemon answered ("+err.Error()+")")

	bindir, err := p.findBindir()
	if err == nil {
		return plan{kind: KindLocal, bindir: bindir, notes: notes}
	}
	return plan{notes: append(notes, err.Error())}
}

// serverKindEnv forces the kind of the shared server: env, docker or local. With it
// there is no fallback to another kind: when the one asked for cannot be had, every
// test that needs the server fails (CI=true or not), and so does a Docker server
// whose container does not start. CI uses PGTX_TEST_SERVER=docker to run the suite
// in a container although local binaries are installed.
const serverKindEnv = "PGTX_TEST_SERVER"

// chooseForced is choose when PGTX_TEST_SERVER is set to want.
func chooseForced(ctx context.Context, p probe, want string) plan {
	asked := serverKindEnv + "=" + want
	switch want {
	case KindEnv:
		for _, name := range envVars {
			if dsn := strings.TrimSpace(p.getenv(name)); dsn != "" {
				return plan{kind: KindEnv, envVar: name, dsn: dsn, forced: want}
			}
		}
		return plan{forced: want, notes: []string{asked + ", and " + strings.Join(envVars, " and ") + " are not set"}}
	case KindDocker:
		pingCtx, cancel := context.WithTimeout(ctx, p.pingTimeout)
		err := p.dockerPing(pingCtx)
		cancel()
		if err == nil {
			return plan{kind: KindDocker, forced: want, notes: []string{asked}}
		}
		return plan{forced: want, notes: []string{asked + ", and no Docker daemon answered (" + err.Error() + ")"}}
	case KindLocal:
		bindir, err := p.findBindir()
		if err == nil {
			return plan{kind: KindLocal, bindir: bindir, forced: want, notes: []string{asked}}
		}
		return plan{forced: want, notes: []string{asked + ", and " + err.Error()}}
	}
	return plan{forced: want, notes: []string{asked + " is none of " + KindEnv + ", " + KindDocker + ", " + KindLocal}}
}

// missingServer tells what a test does when no server can be had: under CI=true it
// fails, elsewhere it is skipped; msg says how to get a server.
func missingServer(getenv func(string) string, p plan) (fail bool, msg string) {
	msg = "pgtxtest: no PostgreSQL server for this test (" + strings.Join(p.notes, "; ") + "). " +
		"To run it, set PGTX_TEST_DATABASE_URL to the postgres:// URL of a server whose role may CREATE DATABASE, " +
		"start a Docker daemon, or install the PostgreSQL server package (initdb and postgres, e.g. apt-get install postgresql)."
	if p.forced != "" {
		return true, msg + " " + serverKindEnv + "=" + p.forced + " asks for that server: its absence is a failure, not a skip."
	}
	if proc.IsCI(getenv) {
		return true, msg + " CI=true: a missing server is a failure, not a skip."
	}
	return false, msg
}

// dedicatedVerdict tells whether New can start a local cluster, given the
// shared server's kind and whether local binaries exist; if not, whether the test
// fails or is skipped, and why.
func dedicatedVerdict(getenv func(string) string, p plan, haveLocal bool) (run, fail bool, msg string) {
	ci := proc.IsCI(getenv)
	switch {
	case haveLocal && (p.kind == KindLocal || p.kind == "" || ci):
		return true, false, ""
	case p.kind == "":
		fail, msg = missingServer(getenv, p)
		return false, fail, msg
	case haveLocal:
		return false, false, fmt.Sprintf("pgtxtest: this test needs a dedicated local server, and the shared server is %s "+
			"(%s); dedicated local servers run only when the shared one is local or CI=true", p.kind, p.describe())
	default:
		return false, false, fmt.Sprintf("pgtxtest: this test needs a dedicated local server (it changes server settings or "+
			"restarts the server), which the %s server (%s) cannot be; install the PostgreSQL server package "+
			"(initdb and postgres) to run it", p.kind, p.describe())
	}
}

func (p plan) describe() string {
	switch p.kind {
	case KindEnv:
		return "from " + p.envVar
	case KindDocker:
		return "a Docker container"
	case KindLocal:
		return "local binaries in " + p.bindir
	}
	return "none"
}

var (
	selection struct {
		once sync.Once
		plan plan
	}
	shared struct {
		once sync.Once
		srv  *Server
		err  error
	}
)

// selected returns the plan for this test binary, choosing it on first use.
func selected() plan {
	selection.once.Do(func() { selection.plan = choose(context.Background(), systemProbe) })
	return selection.plan
}

// Shared returns the server for this test binary, starting it on first use. Without
// any server the test is skipped, or fails when CI=true; if the chosen server cannot
// be started or reached, every test that asks for it fails. pgtxtest.Main stops it.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	p := selected()
	started, took := false, time.Duration(0)
	shared.once.Do(func() {
		start := time.Now()
		shared.srv, shared.err = startPlanned(context.Background(), p)
		started, took = true, time.Since(start)
	})
	if started && shared.srv != nil {
		// Logged here, not inside once.Do: testing attributes a line to the
		// first caller that is not a helper, and sync.Once's frames are not,
		// so a line logged there would point into sync, not at the test.
		how := p.describe()
		if shared.srv.Kind() != p.kind {
			// Docker answered but its container could not start: say so,
			// and why, rather than call the local server a container.
			bindir, _ := pgbin.Find()
			how = "local binaries in " + bindir + ", because the Docker container could not start: " + shared.srv.fellBack
		}
		tb.Logf("pgtxtest: shared %s server at %s (%s%s), ready in %v",
			shared.srv.Kind(), shared.srv.Addr(), how, dockerNote(shared.srv), took.Round(time.Millisecond))
	}
	if shared.err != nil {
		tb.Fatalf("pgtxtest: shared server (%s): %v", p.describe(), shared.err)
	}
	if shared.srv == nil {
		noServer(tb, os.Getenv, p)
	}
	return shared.srv
}

// noServer skips or fails tb, as missingServer says.
func noServer(tb testing.TB, getenv func(string) string, p plan) {
	tb.Helper()
	if fail, msg := missingServer(getenv, p); fail {
		tb.Fatal(msg)
	} else {
		tb.Skip(msg)
	}
}

// New starts a server of its own for a test that must change server settings or
// restart it, and stops it in tb.Cleanup; cfg may be nil. It runs local binaries
// only: when the shared server comes from an env DSN or Docker, the test is
// skipped with the reason, unless CI=true and local binaries exist. Without any
// server it behaves as [Shared]. Invalid settings fail the test.
func New(tb testing.TB, cfg *Config) *Server {
	tb.Helper()
	bindir, err := pgbin.Find()
	run, fail, msg := dedicatedVerdict(os.Getenv, selected(), err == nil)
	switch {
	case fail:
		tb.Fatal(msg)
	case !run:
		tb.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout+copyTimeout+proc.StartAttempts*readyTimeout)
	defer cancel()
	s, err := startOwn(ctx, bindir, cfg)
	if err != nil {
		tb.Fatalf("pgtxtest: dedicated server: %v", err)
	}
	tb.Cleanup(func() {
		tb.Helper() // a failure to stop is reported at the line of the call
		if err := s.Stop(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return s
}

// startOwn starts a local server configured by cfg (nil: the kit's settings).
func startOwn(ctx context.Context, bindir string, cfg *Config) (*Server, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	return startLocal(ctx, bindir, cfg.Settings, cfg.OwnSystem)
}

// startPlanned starts the planned server; it returns (nil, nil) when the plan has
// none. When Docker answered but its container cannot start, local binaries are
// tried before giving up.
func startPlanned(ctx context.Context, p plan) (*Server, error) {
	switch p.kind {
	case KindEnv:
		return openEnv(ctx, p.envVar, p.dsn)
	case KindDocker:
		s, err := startDocker(ctx)
		if err == nil || p.forced != "" {
			return s, err
		}
		bindir, lerr := pgbin.Find()
		if lerr != nil {
			return nil, err
		}
		s, lerr = startLocal(ctx, bindir, nil, false)
		if lerr != nil {
			return nil, errors.Join(err, lerr)
		}
		s.fellBack = err.Error()
		return s, nil
	case KindLocal:
		return startLocal(ctx, p.bindir, nil, false)
	}
	return nil, nil
}
