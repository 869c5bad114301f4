// Command pgtest-serve starts a throwaway PostgreSQL server, chosen as the
// harness chooses one (PGTX_TEST_DATABASE_URL or DATABASE_URL, else Docker,
// else the local server binaries), prints "DSN <connection string>" on
// standard output, and stops the server when its standard input closes.
//
// The root module's tests that need a server and pgtx's unexported state run
// it as a subprocess, so that the root module does not depend on the harness.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/pgtx-go/pgtx/internal/pgtest"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	s, err := pgtest.Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest-serve:", err)
		os.Exit(1)
	}
	fmt.Println("DSN", s.DSN(""))
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it, or exits
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest-serve: stop:", err)
		os.Exit(1)
	}
}
