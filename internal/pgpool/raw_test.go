package pgpool

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/fakepg"
)

// brokenConn fails every write once broken is set, as a socket whose peer
// is gone does.
type brokenConn struct {
	net.Conn
	broken *atomic.Bool
}

func (c brokenConn) Write(b []byte) (int, error) {
	if c.broken.Load() {
		return 0, errors.New("write tcp: broken pipe")
	}
	return c.Conn.Write(b)
}

// TestRunWriteFails: a write that fails leaves the connection closed, as
// pgx leaves one whose write failed, so that nothing takes it for a live
// one and the caller counts the failure as a lost connection.
func TestRunWriteFails(t *testing.T) {
	srv := &fakepg.Server{}
	cc, err := pgx.ParseConfig(fakepg.URL)
	if err != nil {
		t.Fatal(err)
	}
	srv.Reach(&cc.Config)
	var broken atomic.Bool
	dial := cc.DialFunc
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		return brokenConn{c, &broken}, err
	}
	conn, err := pgx.ConnectConfig(context.Background(), cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close(context.Background())
		srv.Wait()
	})
	broken.Store(true)
	if _, err := Run(context.Background(), conn.PgConn(), "begin"); err == nil {
		t.Fatal("Run on a broken connection succeeded")
	}
	if !conn.PgConn().IsClosed() {
		t.Error("the connection whose write failed is still open")
	}
}
