package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/pgtxtest"
)

// connectTimeout bounds the first connection to the server DATABASE_URL
// names.
const connectTimeout = 10 * time.Second

// server is the PostgreSQL the demo runs on.
type server struct {
	dsn string
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
	s, err := pgtxtest.Start(ctx)
	if err != nil {
		return nil, fmt.Errorf("no DATABASE_URL, and no throwaway PostgreSQL could be started: %w", err)
	}
	srv := &server{dsn: s.DSN(""), where: s.String(), stop: func() { _ = s.Stop() }}
	if s.Kind() == pgtxtest.KindEnv {
		srv.named = "PGTX_TEST_DATABASE_URL"
		srv.where = "PGTX_TEST_DATABASE_URL=" + redact(srv.dsn)
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
	return &server{dsn: dsn, named: "DATABASE_URL", where: named, stop: func() {}}, nil
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
