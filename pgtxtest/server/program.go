package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/pgbin"
)

// Start finds or starts a server for a program (an example, the benchmark), which
// stops it with [Server.Stop] (a no-op for a server named by the environment).
// With a nil cfg it is the server [Shared] would choose: PGTX_TEST_DATABASE_URL
// or DATABASE_URL when set, else a Docker container when a daemon answers, else a
// throwaway cluster from the local binaries. With a cfg, it is a local server of
// its own configured by cfg, as [New] starts for a test.
func Start(ctx context.Context, cfg *Config) (*Server, error) {
	if cfg != nil {
		bindir, err := pgbin.Find()
		if err != nil {
			return nil, err
		}
		return startOwn(ctx, bindir, cfg)
	}
	p := choose(ctx, systemProbe)
	if p.kind == "" {
		_, msg := missingServer(func(string) string { return "" }, p)
		return nil, errors.New(msg)
	}
	s, err := startPlanned(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: %s: %w", p.describe(), err)
	}
	return s, nil
}

// DatabaseURL returns the DSN a program should use: DATABASE_URL as is when
// it is set, else the DSN of a throwaway server started with Start. cleanup
// stops that server; it is safe to call more than once.
func DatabaseURL(ctx context.Context) (dsn string, cleanup func(), err error) {
	if dsn := strings.TrimSpace(os.Getenv("DATABASE_URL")); dsn != "" {
		return dsn, func() {}, nil
	}
	s, err := Start(ctx, nil)
	if err != nil {
		return "", nil, err
	}
	return s.DSN(""), func() { _ = s.Stop() }, nil
}
