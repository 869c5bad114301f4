package pgtxtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Start finds or starts a server for a program (an example, the benchmark):
// PGTX_TEST_DATABASE_URL or DATABASE_URL when set, else a Docker container
// when a daemon answers, else a throwaway cluster from the local binaries.
// The caller stops it with Stop (a no-op for a server named by the
// environment).
func Start(ctx context.Context) (*Server, error) {
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
	s, err := Start(ctx)
	if err != nil {
		return "", nil, err
	}
	return s.DSN(""), func() { _ = s.Stop() }, nil
}
