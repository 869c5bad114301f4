package pgpool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// pgpool2 is Pgpool-II as the kit finds it.
var pgpool2 = proc.Program{Name: "Pgpool-II", Binary: "pgpool", Env: "PGTX_TEST_PGPOOL",
	Default: pgpoolDefaultPath, Package: "pgpool2"}

// errNoServer is New's error for a server the kit did not make.
var errNoServer = errors.New("pgtxtest: pgpool.New needs servers from server.New and server.NewStandby")

// checkServers checks that every server has a DSN, and that there are no more
// than pgpool's 128 backends.
func checkServers(servers []*server.Server) error {
	for _, s := range servers {
		if s == nil || s.DSN("") == "" {
			return errNoServer
		}
	}
	if len(servers) > 128 {
		return fmt.Errorf("pgtxtest: pgpool.New: %d servers, pgpool takes at most 128", len(servers))
	}
	return nil
}

// startPgpool is New without the testing.TB: it validates opts, makes the
// directory and runs bin, retrying on new ports when a chosen one was taken.
func startPgpool(ctx context.Context, bin string, servers []*server.Server, opts Config) (*Pgpool, error) {
	if err := checkServers(servers); err != nil {
		return nil, err
	}
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	params, err := serverParams(servers)
	if err != nil {
		return nil, err
	}
	cred, err := proc.Credential()
	if err != nil {
		return nil, err
	}
	base := proc.BaseDir()
	sweepStalePgpools(base, bin)
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", pgpoolDirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: make pgpool directory: %w", err)
	}
	params.dir = dir
	p := &Pgpool{primary: servers[0], bin: bin, dir: dir, user: params.user, nodes: len(servers), cred: cred}
	if err := p.prepare(); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	var startErr error
	for range proc.StartAttempts {
		if p.port, startErr = proc.FreePort(); startErr != nil {
			break
		}
		if p.pcpPort, startErr = proc.FreePort(); startErr != nil {
			break
		}
		if p.pcpPort == p.port { // free twice: the next attempt takes two new ports
			startErr = proc.ErrPortTaken
			continue
		}
		params.port, params.pcpPort = p.port, p.pcpPort
		if startErr = p.writeFile(p.confPath(), cfg.confText(params)); startErr != nil {
			break
		}
		if startErr = p.start(ctx); !errors.Is(startErr, proc.ErrPortTaken) {
			break
		}
	}
	if startErr != nil {
		return nil, errors.Join(startErr, os.RemoveAll(dir))
	}
	return p, nil
}

// serverParams returns what pgpool.conf says of the servers: their TCP addresses
// and the primary's user, password and default database.
func serverParams(servers []*server.Server) (confParams, error) {
	var c confParams
	u, err := url.Parse(servers[0].DSN(""))
	if err != nil {
		return c, fmt.Errorf("pgtxtest: pgpool.New: the primary's DSN: %w", err)
	}
	c.user = u.User.Username()
	if c.user == "" {
		c.user = proc.Superuser
	}
	c.password, _ = u.User.Password()
	c.database = strings.TrimPrefix(u.Path, "/")
	if c.database == "" {
		c.database = c.user
	}
	if strings.ContainsAny(c.user+c.password+c.database, "'\\:\x00\r\n") {
		return c, errors.New("pgtxtest: pgpool.New: the server's user name, password or database holds a quote, backslash, colon or line break")
	}
	for _, s := range servers {
		host, port, err := net.SplitHostPort(s.Addr())
		if err != nil {
			return c, fmt.Errorf("pgtxtest: pgpool.New: server address %q: %w", s.Addr(), err)
		}
		c.backends = append(c.backends, backend{host: host, port: port})
	}
	return c, nil
}

func (p *Pgpool) confPath() string    { return filepath.Join(p.dir, "pgpool.conf") }
func (p *Pgpool) pcpConfPath() string { return filepath.Join(p.dir, "pcp.conf") }
func (p *Pgpool) pcpPassPath() string { return filepath.Join(p.dir, "pcppass") }
func (p *Pgpool) pidPath() string     { return filepath.Join(p.dir, "pgpool.pid") }

// prepare writes pcp.conf with a random password for the PCP user and the
// PCPPASSFILE that gives it to the pcp tools, and hands the directory to the
// servers' user, who runs pgpool and so writes its pid file and sockets there.
// The PCPPASSFILE stays ours: the pcp tools run as this process.
func (p *Pgpool) prepare() error {
	random := make([]byte, 16)
	_, _ = rand.Read(random)
	password := hex.EncodeToString(random)
	if err := os.WriteFile(p.pcpPassPath(), []byte(pcpPassText(p.user, password)), 0o600); err != nil {
		return fmt.Errorf("pgtxtest: write pgpool's PCPPASSFILE: %w", err)
	}
	if p.cred != nil {
		if err := os.Chown(p.dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return fmt.Errorf("pgtxtest: hand %s to the postgres user: %w", p.dir, err)
		}
	}
	return p.writeFile(p.pcpConfPath(), pcpConfText(p.user, password))
}

// writeFile writes one of pgpool's own files, readable by the user who runs it only.
func (p *Pgpool) writeFile(path, text string) error {
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return fmt.Errorf("pgtxtest: write %s: %w", filepath.Base(path), err)
	}
	if p.cred != nil {
		if err := os.Chown(path, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return fmt.Errorf("pgtxtest: hand %s to the postgres user: %w", path, err)
		}
	}
	return nil
}

// start runs pgpool in the foreground, in a process group of its own with its
// children, on p.port and waits until it is ready. The caller holds p.mu, or is
// startPgpool.
func (p *Pgpool) start(ctx context.Context) error {
	_ = os.Remove(p.pidPath()) // left by a pgpool that was killed; its pid may be another's now
	cmd := exec.Command(p.bin, "-n", "-D", "-f", p.confPath(), "-F", p.pcpConfPath())
	cmd.Dir = p.dir
	pr, from, err := proc.Launch{Name: "pgpool", Port: p.port, Log: p.LogPath(), Cmd: cmd, Cred: p.cred, Group: true,
		Ready: func(ctx context.Context, pr *proc.Process, from int64) error {
			p.logFrom = from
			return p.waitReady(ctx, pr)
		},
		Stop: func(pr *proc.Process) error {
			p.proc = pr
			return p.stopProcess()
		},
	}.Run(ctx)
	if err != nil {
		return err
	}
	p.proc, p.logFrom = pr, from
	return nil
}

// waitReady polls until this pgpool has said it started, a query through it
// answers and every node is up behind it, or the process exits, or
// pgpoolReadyTimeout passes.
func (p *Pgpool) waitReady(ctx context.Context, pr *proc.Process) error {
	ctx, cancel := context.WithTimeout(ctx, pgpoolReadyTimeout)
	defer cancel()
	return pr.WaitReady(ctx, "pgpool", func(ctx context.Context) (bool, error) {
		err := p.probe(ctx)
		return err != nil, err
	})
}

// probe checks once that this pgpool is ready. Its log, which no other process
// writes, says it started once it holds its ports and knows the primary.
func (p *Pgpool) probe(ctx context.Context) error {
	if !strings.Contains(proc.Tail(p.LogPath(), p.logFrom, 1<<20), "successfully started") {
		return errors.New("pgpool has not logged that it started")
	}
	for _, sql := range []string{"SHOW POOL_VERSION", "SELECT 1"} {
		if _, _, err := p.show(ctx, sql, 5*time.Second); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	nodes, err := p.Nodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		// A node pgpool has not yet connected to is "waiting"; SHOW POOL_NODES's
		// own session connects to every node pgpool holds up, and leaves one it
		// could not reach "waiting" when failover_on_backend_error is off.
		if n.Status != "up" {
			return fmt.Errorf("node %d (%s) is %s", n.ID, n.Addr, n.Status)
		}
	}
	if len(nodes) != p.nodes {
		return fmt.Errorf("SHOW POOL_NODES lists %d nodes, want %d", len(nodes), p.nodes)
	}
	return nil
}

// show runs sql with the simple protocol over a new connection through pgpool to
// the server's default database, bounded by timeout, and returns the column
// names and rows of its result.
func (p *Pgpool) show(ctx context.Context, sql string, timeout time.Duration) ([]string, [][][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgconn.Connect(ctx, p.DSN(""))
	if err != nil {
		return nil, nil, err
	}
	res, err := conn.Exec(ctx, sql).ReadAll()
	closeCtx, closeCancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer closeCancel()
	err = errors.Join(err, conn.Close(closeCtx))
	if err != nil || len(res) == 0 {
		return nil, nil, err
	}
	last := res[len(res)-1]
	fields := make([]string, len(last.FieldDescriptions))
	for i, f := range last.FieldDescriptions {
		fields[i] = f.Name
	}
	return fields, last.Rows, last.Err
}
