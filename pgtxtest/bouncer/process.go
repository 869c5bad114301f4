package bouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// pgbouncer is PgBouncer as the kit finds it.
var pgbouncer = proc.Program{Name: "PgBouncer", Binary: "pgbouncer", Env: "PGTX_TEST_PGBOUNCER",
	Default: bouncerDefaultPath, Package: "pgbouncer"}

// errNoServer is New's error for a server the kit did not make.
var errNoServer = errors.New("pgtxtest: bouncer.New needs a server from server.Shared or server.New")

// serverUser returns the user of s's DSN; ok is false for a nil s or a Server
// without a DSN.
func serverUser(s *server.Server) (user *url.Userinfo, ok bool) {
	if s == nil || s.DSN("") == "" {
		return nil, false
	}
	u, err := url.Parse(s.DSN(""))
	if err != nil {
		return nil, false
	}
	if u.User == nil {
		return url.User(""), true
	}
	return u.User, true
}

// startBouncer is New without the testing.TB: it validates opts, makes the
// directory and runs bin, retrying on a new port when the chosen one was taken.
func startBouncer(ctx context.Context, bin string, s *server.Server, opts Config) (*Bouncer, error) {
	userinfo, ok := serverUser(s)
	if !ok {
		return nil, errNoServer
	}
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	upHost, upPort, err := net.SplitHostPort(s.Addr())
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: bouncer.New: server address %q: %w", s.Addr(), err)
	}
	user := userinfo.Username()
	if user == "" {
		user = proc.Superuser
	}
	password, _ := userinfo.Password()
	if strings.ContainsAny(user+password, "\x00\r\n") {
		return nil, errors.New("pgtxtest: bouncer.New: the server's user name or password contains a line break or NUL byte")
	}
	cred, err := proc.Credential()
	if err != nil {
		return nil, err
	}
	base := proc.BaseDir()
	sweepStaleBouncers(base)
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", bouncerDirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: make pgbouncer directory: %w", err)
	}
	b := &Bouncer{server: s, bin: bin, dir: dir, user: user, cred: cred}
	if err := b.prepare(password); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	var startErr error
	for range proc.StartAttempts {
		if b.port, startErr = proc.FreePort(); startErr != nil {
			break
		}
		if startErr = b.writeConfig(cfg, upHost, upPort); startErr != nil {
			break
		}
		if startErr = b.start(ctx); !errors.Is(startErr, proc.ErrPortTaken) {
			break
		}
	}
	if startErr != nil {
		return nil, errors.Join(startErr, os.RemoveAll(dir))
	}
	return b, nil
}

func (b *Bouncer) iniPath() string      { return filepath.Join(b.dir, "pgbouncer.ini") }
func (b *Bouncer) userlistPath() string { return filepath.Join(b.dir, "userlist.txt") }
func (b *Bouncer) outPath() string      { return filepath.Join(b.dir, "pgbouncer.out") }

// prepare writes the auth file and hands the directory to the server's user, who
// runs pgbouncer and so must be able to write its log and pid file there.
func (b *Bouncer) prepare(password string) error {
	list := quoteUserlist(b.user) + " " + quoteUserlist(password) + "\n"
	if err := os.WriteFile(b.userlistPath(), []byte(list), 0o600); err != nil {
		return fmt.Errorf("pgtxtest: write pgbouncer auth file: %w", err)
	}
	if b.cred != nil {
		for _, path := range []string{b.dir, b.userlistPath()} {
			if err := os.Chown(path, int(b.cred.Uid), int(b.cred.Gid)); err != nil {
				return fmt.Errorf("pgtxtest: hand %s to the postgres user: %w", path, err)
			}
		}
	}
	return nil
}

// writeConfig writes pgbouncer.ini for the current port.
func (b *Bouncer) writeConfig(cfg bouncerConfig, upHost, upPort string) error {
	text := cfg.iniText(b.dir, b.port, b.user, upHost, upPort)
	if err := os.WriteFile(b.iniPath(), []byte(text), 0o644); err != nil {
		return fmt.Errorf("pgtxtest: write pgbouncer.ini: %w", err)
	}
	return nil
}

// start runs pgbouncer in the foreground on b.port and waits until it is ready.
func (b *Bouncer) start(ctx context.Context) error {
	cmd := exec.Command(b.bin, b.iniPath())
	cmd.Dir = b.dir
	p, from, err := proc.Launch{Name: "pgbouncer", Port: b.port, Log: b.outPath(), Cmd: cmd, Cred: b.cred,
		Ready: func(ctx context.Context, p *proc.Process, from int64) error {
			b.logFrom = from
			return b.waitReady(ctx, p)
		},
		Stop: func(p *proc.Process) error {
			b.proc = p
			return b.stopProcess()
		},
	}.Run(ctx)
	if err != nil {
		return err
	}
	b.proc, b.logFrom = p, from
	return nil
}

// waitReady polls until the admin console shows that the pgbouncer on the port is
// this one and a query through it to the server's default database answers, or the
// process exits, or bouncerReadyTimeout passes.
func (b *Bouncer) waitReady(ctx context.Context, p *proc.Process) error {
	ctx, cancel := context.WithTimeout(ctx, bouncerReadyTimeout)
	defer cancel()
	return p.WaitReady(ctx, "pgbouncer", func(ctx context.Context) (bool, error) {
		err := b.probe(ctx)
		return err != nil && !errors.Is(err, proc.ErrPortTaken), err
	})
}

// probe checks once that this pgbouncer answers on its port: its admin console
// reports its log file, and a query through it reaches the server.
func (b *Bouncer) probe(ctx context.Context) error {
	rows, err := b.exec(ctx, b.AdminDSN(), "SHOW CONFIG", time.Second)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return fmt.Errorf("%w: the admin console refused: %w", proc.ErrPortTaken, err)
		}
		return err
	}
	logfile := ""
	for _, row := range rows {
		if len(row) >= 2 && string(row[0]) == "logfile" {
			logfile = string(row[1])
		}
	}
	if filepath.Clean(logfile) != filepath.Clean(b.LogPath()) {
		return fmt.Errorf("%w: a pgbouncer with logfile %q answers", proc.ErrPortTaken, logfile)
	}
	_, err = b.exec(ctx, b.DSN(""), "SELECT 1", 5*time.Second)
	return err
}

// exec runs sql with the simple protocol over a new connection to dsn, bounded by
// timeout, and returns the rows of its last result.
func (b *Bouncer) exec(ctx context.Context, dsn, sql string, timeout time.Duration) ([][][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	results, err := conn.Exec(ctx, sql).ReadAll()
	closeCtx, closeCancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer closeCancel()
	err = errors.Join(err, conn.Close(closeCtx))
	if err != nil || len(results) == 0 {
		return nil, err
	}
	last := results[len(results)-1]
	return last.Rows, last.Err
}

// stopProcess sends SIGTERM and waits until pgbouncer has exited, sending SIGKILL if
// it does not within bouncerStopTimeout.
func (b *Bouncer) stopProcess() error {
	p := b.proc
	if p == nil {
		return nil
	}
	b.proc = nil
	return p.Stop("pgbouncer", syscall.SIGTERM, bouncerStopTimeout)
}

// sweepStaleBouncers removes the bouncer directories in base of test binaries that
// died without cleaning up (their pgbouncers died with them, see serverSysProcAttr).
func sweepStaleBouncers(base string) {
	for _, dir := range proc.DeadBinariesDirs(base, bouncerDirPrefix) {
		_ = os.RemoveAll(dir)
	}
}
