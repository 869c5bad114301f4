package pgtx

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/fakeclock"
	"github.com/pgtx-go/pgtx/internal/retry"
)

// fatal08P01 is an error as PgBouncer sends it: FATAL, SQLSTATE 08P01, its
// own text or the server's relayed.
func fatal08P01(msg string) error {
	return &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "08P01", Message: msg}
}

// TestPoolerAndUnavailableClasses: PgBouncer's real texts (1.18 and later),
// the server's overload errors it relays under 08P01, a server that refuses
// connections (its own class), and errors no retry can fix (permanent at
// once).
func TestPoolerAndUnavailableClasses(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	noSocket := &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ENOENT)}
	noHost := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "db.invalid", IsNotFound: true}}
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"pgbouncer database removed (KILL)", fatal08P01("database removed"), ClassConnectionLost},
		{"pgbouncer admin forced disconnect (1.24+)", fatal08P01("admin forced disconnect"), ClassConnectionLost},
		{"pgbouncer client_idle_timeout", fatal08P01("client_idle_timeout"), ClassConnectionLost},
		{"relayed 53300 sorry", fatal08P01("sorry, too many clients already"), ClassOverload},
		{"relayed 53300 reserved slots (PG 15)", fatal08P01("remaining connection slots are reserved for non-replication superuser connections"), ClassOverload},
		{"relayed 53300 reserved slots (PG 16)", fatal08P01("remaining connection slots are reserved for roles with the SUPERUSER attribute"), ClassOverload},
		{"relayed 53300 per role", fatal08P01(`too many connections for role "app"`), ClassOverload},
		{"relayed 53300 per database", fatal08P01(`too many connections for database "app"`), ClassOverload},
		{"relayed 57P03 starting up", fatal08P01("the database system is starting up"), ClassUnavailable},
		{"relayed 57P03 shutting down", fatal08P01("the database system is shutting down"), ClassUnavailable},
		{"pgbouncer 1.18 login retry", fatal08P01("server login has been failing, try again later (server_login_retry)"), ClassUnavailable},
		{"pgbouncer no such database", fatal08P01("no such database: app"), ClassPermanent},
		{"refused: unavailable", refused, ClassUnavailable},
		{"no such socket file", noSocket, ClassPermanent},
		{"no such host", noHost, ClassPermanent},
		{"28P01 bad password", pgErr("28P01"), ClassPermanent},
		{"28000 no pg_hba entry", pgErr("28000"), ClassPermanent},
		{"3D000 no such database", pgErr("3D000"), ClassPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestBudgetRefusalSaysWhy: the message of a refused retry says that the
// budget stopped it, and ends with what went wrong.
func TestBudgetRefusalSaysWhy(t *testing.T) {
	cause := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	err := error(&RetryError{Attempts: 1, Err: cause, why: retry.Why{Stop: retry.BudgetSpent}})
	if want := "pgtx: gave up after 1 attempt (retry budget exhausted): " + cause.Error(); err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if !errors.Is(err, ErrRetryBudgetExhausted) || !errors.Is(err, cause) {
		t.Errorf("err %v must match ErrRetryBudgetExhausted and keep the cause", err)
	}
}

// TestContextErrorOnlyWhenItEndedTheCall: an ambiguous COMMIT or a
// permanent error that races the caller's cancellation keeps its class and
// does not match the context's error; an error the loop would have retried,
// or a cancelled statement, does.
func TestContextErrorOnlyWhenItEndedTheCall(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		wantCtx   bool
		wantClass Class
	}{
		{"ambiguous commit", lostCommit(pgconn.ErrConnClosed), false, ClassAmbiguous},
		{"unique violation", pgErr("23505"), false, ClassPermanent},
		{"caller error", errCaller, false, ClassPermanent},
		{"conflict the loop would retry", pgErr(pgerrcode.SerializationFailure), true, ClassTimeout},
		{"statement cancelled", pgErr(pgerrcode.QueryCanceled), true, ClassTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l := newLoop(RetryConfig{}, &fakeclock.Clock{T: time.Unix(1000, 0)})
			err := l.run(ctx, func(context.Context) (Class, error) {
				cancel() // the caller gives up while the attempt ends
				return Classify(tt.err), tt.err
			})
			if got := errors.Is(err, context.Canceled); got != tt.wantCtx {
				t.Errorf("errors.Is(err, context.Canceled) = %v, want %v (err %v)", got, tt.wantCtx, err)
			}
			if got := Classify(err); got != tt.wantClass {
				t.Errorf("Classify(err) = %v, want %v", got, tt.wantClass)
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("err %v lost the attempt's error", err)
			}
		})
	}
}
