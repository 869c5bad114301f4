package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
)

func TestSelectOrder(t *testing.T) {
	t.Parallel()
	errNoDocker := errors.New("cannot connect to the Docker daemon")
	errNoBins := errors.New("no binaries")
	const urlA, urlB = "postgres://a@db-a:5432/a", "postgres://b@db-b:5432/b"
	tests := []struct {
		name       string
		env        map[string]string
		ping       error
		bindir     string
		binErr     error
		wantKind   string
		wantEnvVar string
		wantDSN    string
		wantPinged bool
		wantLooked bool
		wantNotes  []string
	}{
		{
			name: "test URL wins over everything", env: map[string]string{"PGTX_TEST_DATABASE_URL": urlA, "DATABASE_URL": urlB},
			bindir: "/bin", wantKind: KindEnv, wantEnvVar: "PGTX_TEST_DATABASE_URL", wantDSN: urlA,
		},
		{
			name: "DATABASE_URL when the test URL is unset", env: map[string]string{"DATABASE_URL": urlB},
			bindir: "/bin", wantKind: KindEnv, wantEnvVar: "DATABASE_URL", wantDSN: urlB,
		},
		{
			name: "blank variables do not count", env: map[string]string{"PGTX_TEST_DATABASE_URL": "  ", "DATABASE_URL": ""},
			bindir: "/bin", wantKind: KindDocker, wantPinged: true,
		},
		{
			name: "docker when its daemon answers, local binaries not needed", bindir: "/bin",
			wantKind: KindDocker, wantPinged: true,
		},
		{
			name: "local binaries when docker does not answer", ping: errNoDocker, bindir: "/usr/lib/postgresql/15/bin",
			wantKind: KindLocal, wantPinged: true, wantLooked: true,
			wantNotes: []string{"are not set", "no Docker daemon answered (cannot connect to the Docker daemon)"},
		},
		{
			name: "nothing", ping: errNoDocker, binErr: errNoBins,
			wantKind: "", wantPinged: true, wantLooked: true,
			wantNotes: []string{"are not set", "no Docker daemon answered", "no binaries"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var pinged, looked bool
			p := choose(context.Background(), probe{
				getenv:      kittest.FakeEnv(tc.env),
				dockerPing:  func(context.Context) error { pinged = true; return tc.ping },
				pingTimeout: time.Second,
				findBindir:  func() (string, error) { looked = true; return tc.bindir, tc.binErr },
			})
			if p.kind != tc.wantKind || p.envVar != tc.wantEnvVar || p.dsn != tc.wantDSN {
				t.Errorf("choose = kind %q var %q dsn %q, want %q %q %q", p.kind, p.envVar, p.dsn, tc.wantKind, tc.wantEnvVar, tc.wantDSN)
			}
			if tc.wantKind == KindLocal && p.bindir != tc.bindir {
				t.Errorf("bindir = %q, want %q", p.bindir, tc.bindir)
			}
			if pinged != tc.wantPinged || looked != tc.wantLooked {
				t.Errorf("pinged docker %v, looked for binaries %v; want %v, %v", pinged, looked, tc.wantPinged, tc.wantLooked)
			}
			notes := strings.Join(p.notes, "; ")
			for _, want := range tc.wantNotes {
				if !strings.Contains(notes, want) {
					t.Errorf("notes %q lack %q", notes, want)
				}
			}
		})
	}
}

// A daemon that never answers costs the ping timeout, not a hang.
func TestSelectDockerPingIsBounded(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	start := time.Now()
	p := choose(context.Background(), probe{
		getenv: kittest.FakeEnv(nil),
		dockerPing: func(ctx context.Context) error {
			deadline, ok := ctx.Deadline()
			if !ok || time.Until(deadline) > timeout {
				t.Errorf("ping context deadline %v (set: %v), want within %v", time.Until(deadline), ok, timeout)
			}
			<-ctx.Done()
			return ctx.Err()
		},
		pingTimeout: timeout,
		findBindir:  func() (string, error) { return "/bin", nil },
	})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("choose took %v with a daemon that never answers", took)
	}
	if p.kind != KindLocal {
		t.Errorf("kind = %q, want %q", p.kind, KindLocal)
	}
}

func TestCINoServerFailsElseSkips(t *testing.T) {
	t.Parallel()
	none := plan{notes: []string{"PGTX_TEST_DATABASE_URL and DATABASE_URL are not set", "no Docker daemon answered (x)", "no binaries"}}
	tests := []struct {
		ci       string
		wantFail bool
	}{
		{"true", true}, {"1", true}, {"TRUE", true}, {"", false}, {"false", false}, {"0", false}, {"yes", false},
	}
	for _, tc := range tests {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Parallel()
			getenv := kittest.FakeEnv(map[string]string{"CI": tc.ci})
			fail, msg := missingServer(getenv, none)
			if fail != tc.wantFail {
				t.Errorf("missingServer fail = %v, want %v", fail, tc.wantFail)
			}
			for _, want := range []string{"PGTX_TEST_DATABASE_URL", "Docker", "PostgreSQL server package", "no binaries"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not mention %q", msg, want)
				}
			}

			// The same verdict drives the test: Fatal under CI, Skip elsewhere.
			tb := kittest.RunFakeTB(func(tb testing.TB) { noServer(tb, getenv, none) })
			if tb.Failed() != tc.wantFail || tb.Skipped() == tc.wantFail {
				t.Errorf("noServer: failed %v skipped %v, want failed %v", tb.Failed(), tb.Skipped(), tc.wantFail)
			}
		})
	}
}

func TestDedicatedVerdict(t *testing.T) {
	t.Parallel()
	local := plan{kind: KindLocal, bindir: "/bin"}
	env := plan{kind: KindEnv, envVar: "PGTX_TEST_DATABASE_URL"}
	docker := plan{kind: KindDocker}
	none := plan{notes: []string{"nothing"}}
	tests := []struct {
		name      string
		ci        string
		p         plan
		haveLocal bool
		wantRun   bool
		wantFail  bool
		wantMsg   string
	}{
		{name: "local shared server", p: local, haveLocal: true, wantRun: true},
		{name: "env server, local binaries, not CI: skip", p: env, haveLocal: true, wantMsg: "PGTX_TEST_DATABASE_URL"},
		{name: "env server, local binaries, CI: run", ci: "true", p: env, haveLocal: true, wantRun: true},
		{name: "env server, no local binaries, CI: skip", ci: "true", p: env, wantMsg: "install the PostgreSQL server package"},
		{name: "docker server, local binaries, not CI: skip", p: docker, haveLocal: true, wantMsg: "docker"},
		{name: "docker server, local binaries, CI: run", ci: "true", p: docker, haveLocal: true, wantRun: true},
		{name: "no server, CI: fail", ci: "true", p: none, wantFail: true, wantMsg: "CI=true"},
		{name: "no server, not CI: skip", p: none, wantMsg: "PGTX_TEST_DATABASE_URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run, fail, msg := dedicatedVerdict(kittest.FakeEnv(map[string]string{"CI": tc.ci}), tc.p, tc.haveLocal)
			if run != tc.wantRun || fail != tc.wantFail || !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("dedicatedVerdict = run %v fail %v msg %q; want run %v fail %v msg containing %q",
					run, fail, msg, tc.wantRun, tc.wantFail, tc.wantMsg)
			}
		})
	}
}
