package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	pgserver "github.com/pgtx-go/pgtx/pgtxtest/server"
)

// connectTimeout bounds the first connection to the server DATABASE_URL
// names.
const connectTimeout = 10 * time.Second

// server is the PostgreSQL the demo runs on.
type server struct {
	dsn string
	// addr is the host:port a fault proxy may stand in front of; "" when
	// none may (a Unix socket, several hosts, a server on another machine).
	addr string
	// noProxy says why addr is "".
	noProxy string
	// named is the environment variable that named the server, "" for a
	// throwaway server; where says what and where the server is.
	named, where string
	stop         func()
}

// describe says which server the demo runs on, of version version.
func (s *server) describe(version string) string {
	if s.named == "" {
		return fmt.Sprintf("started a throwaway PostgreSQL %s, %s; it is removed at the end", version, s.where)
	}
	return fmt.Sprintf("%s (PostgreSQL %s)", s.where, version)
}

// findServer returns the server named by DATABASE_URL, after checking that
// it answers, or else a throwaway server that pgtxtest starts (from the
// local PostgreSQL binaries, or in Docker), which stop removes.
func findServer(ctx context.Context) (*server, error) {
	if dsn := strings.TrimSpace(os.Getenv("DATABASE_URL")); dsn != "" {
		return envServer(ctx, dsn)
	}
	s, err := pgserver.Start(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("no DATABASE_URL, and no throwaway PostgreSQL could be started: %w", err)
	}
	srv := &server{dsn: s.DSN(""), addr: s.Addr(), where: s.String(), stop: func() { _ = s.Stop() }}
	if s.Kind() == pgserver.KindEnv {
		srv.named = "PGTX_TEST_DATABASE_URL"
		srv.where = "PGTX_TEST_DATABASE_URL=" + redact(srv.dsn)
	}
	srv.noProxy = proxyRefusal(srv.dsn)
	if srv.noProxy != "" {
		srv.addr = ""
	}
	return srv, nil
}

// envServer checks that the server DATABASE_URL names answers.
func envServer(ctx context.Context, dsn string) (*server, error) {
	named := "DATABASE_URL=" + redact(dsn)
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", named, err)
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s did not answer: %w", named, err)
	}
	_ = conn.Close(ctx)
	srv := &server{dsn: dsn, named: "DATABASE_URL", where: named, stop: func() {}}
	if srv.noProxy = proxyRefusal(dsn); srv.noProxy == "" {
		srv.addr = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	return srv, nil
}

// proxyRefusal says why no fault proxy may stand between the demo and the
// server of dsn, or returns "". The proxy listens on 127.0.0.1 and speaks no
// TLS, so it only fronts a server on this machine, reached over TCP.
func proxyRefusal(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return err.Error()
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return "the server is reached over a Unix socket"
	}
	for _, f := range cfg.Fallbacks {
		if f.Host != cfg.Host || f.Port != cfg.Port {
			return "the connection string names several servers"
		}
	}
	if ip := net.ParseIP(cfg.Host); cfg.Host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "the server is on another machine, and the fault proxy speaks no TLS"
	}
	return ""
}

// viaProxy points a connection configuration at addr, a fault proxy, and
// keeps everything else (user, database, parameters).
func viaProxy(cfg *pgconn.Config, addr string) error {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return err
	}
	cfg.Host, cfg.Port = host, uint16(port)
	for _, f := range cfg.Fallbacks {
		f.Host, f.Port = host, uint16(port)
	}
	return nil
}

// redact hides the password of a connection string, a URL or keyword/value
// pairs.
func redact(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "(a URL that does not parse)"
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	password := regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
	return password.ReplaceAllString(dsn, "${1}xxxxx")
}

// settle waits until the sessions whose application_name starts with app
// have ended, so that what they applied is final: a session whose client
// gave up at its deadline may still be running its statement, or COMMIT.
// Those still there after a while are terminated.
func settle(ctx context.Context, admin *pgx.Conn, app string) error {
	const count = "select count(*) from pg_stat_activity where starts_with(application_name, $1)"
	wait := func(d time.Duration) (int, error) {
		end := time.Now().Add(d)
		for {
			var n int
			if err := admin.QueryRow(ctx, count, app).Scan(&n); err != nil || n == 0 || time.Now().After(end) {
				return n, err
			}
			t := time.NewTimer(20 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return n, ctx.Err()
			case <-t.C:
			}
		}
	}
	n, err := wait(settleTimeout / 2)
	if err != nil || n == 0 {
		return err
	}
	_, err = admin.Exec(ctx, "select pg_terminate_backend(pid) from pg_stat_activity where starts_with(application_name, $1)", app)
	if err != nil {
		return fmt.Errorf("terminate the %d sessions left: %w", n, err)
	}
	if n, err = wait(settleTimeout / 2); err == nil && n > 0 {
		err = fmt.Errorf("%d sessions still running after %v: the books cannot be read", n, settleTimeout)
	}
	return err
}
