package txn

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestContainsFold(t *testing.T) {
	tests := []struct {
		s    string
		want bool
	}{
		{"notify ch, 'x'", true},
		{"NOTIFY ch", true},
		{"select pg_notify('ch', 'x')", true},
		{"select Pg_Notify('ch', 'x')", true},
		{"select 1", false},
		{"", false},
		{"notif", false},
		{"insert into notifications values (1)", false}, // "notifi..." is not "notify"
	}
	for _, tt := range tests {
		if got := containsFold(tt.s, "notify"); got != tt.want {
			t.Errorf("containsFold(%q, notify) = %v, want %v", tt.s, got, tt.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = containsFold("select pg_notify('a', 'b')", "notify") }); n != 0 {
		t.Errorf("containsFold allocates %v times", n)
	}
}

func TestHasQueryOption(t *testing.T) {
	tests := []struct {
		name string
		args []any
		want bool
	}{
		{"none", nil, false},
		{"an argument", []any{1}, false},
		{"an exec mode", []any{pgx.QueryExecModeSimpleProtocol, 1}, true},
		{"result formats", []any{pgx.QueryResultFormats{1}}, true},
		{"result formats by oid", []any{pgx.QueryResultFormatsByOID{}}, true},
		{"named args (a rewriter, which a batch takes)", []any{pgx.NamedArgs{"a": 1}}, false},
	}
	for _, tt := range tests {
		if got := hasQueryOption(tt.args); got != tt.want {
			t.Errorf("%s: hasQueryOption = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestTracking: the statements after the first write read the id after
// them until a read finds one, also after a statement that could not carry
// the read, and never once a notification may have been sent.
func TestTracking(t *testing.T) {
	tests := []struct {
		name                          string
		capture                       capture
		idRead, idNull, stale, notify bool
		want                          bool
	}{
		{"no id so far, every statement read it", captureID, true, true, false, false, true},
		{"behind a pooler", captureIDRun, true, true, false, false, true},
		{"the pool does not read ids", captureNone, true, true, false, false, false},
		{"the id is known", captureID, true, false, false, false, false},
		{"the first write did not read it", captureID, false, false, true, false, true},
		{"a statement did not read it", captureID, true, true, true, false, true},
		{"the id is known, a statement since did not read it", captureID, true, false, true, false, false},
		{"a notification", captureID, true, true, false, true, false},
		{"a notification, the id not read", captureID, false, false, true, true, false},
	}
	for _, tt := range tests {
		x := &idTracker{capture: tt.capture, idRead: tt.idRead, idNull: tt.idNull, stale: tt.stale, notify: tt.notify}
		if got := x.tracking(); got != tt.want {
			t.Errorf("%s: tracking = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestReadAfterStaleStatements: an id read, which goes after every
// statement sent so far, leaves nothing unread (stale), whatever it finds.
func TestReadAfterStaleStatements(t *testing.T) {
	for _, r := range []idRow{{null: true}, {xid: 7, lsn: 42}} {
		x := &idTracker{capture: captureID, stale: true}
		x.set(r)
		if x.stale || !x.idRead || x.idNull != r.null || x.id.Xid != r.xid {
			t.Errorf("after a read of %+v: %+v, want it read and nothing stale", r, x)
		}
		if got, want := x.idAtCommit(), false; got != want {
			t.Errorf("after a read of %+v: idAtCommit = %v, want %v", r, got, want)
		}
		if got, want := x.writeFree(), r.null; got != want {
			t.Errorf("after a read of %+v: writeFree = %v, want %v", r, got, want)
		}
	}
}

// TestAfterAndScan: what a statement sent after the first write, and a
// statement's text, tell of the transaction's id.
func TestAfterAndScan(t *testing.T) {
	tests := []struct {
		name            string
		idRead, idNull  bool
		sql             string
		stale, notified bool
	}{
		{"id known: nothing changes", true, false, "select 1", false, false},
		{"no id yet: it may have one now", true, true, "update t set a = 1", true, false},
		{"id never read", false, false, "select 1", true, false},
		{"a notification", true, false, "select pg_notify('c', 'x')", false, true},
	}
	for _, tt := range tests {
		x := &idTracker{idRead: tt.idRead, idNull: tt.idNull}
		x.scan(tt.sql)
		x.after()
		if x.stale != tt.stale || x.notify != tt.notified {
			t.Errorf("%s: stale %v notify %v, want %v %v", tt.name, x.stale, x.notify, tt.stale, tt.notified)
		}
	}
}

// TestClosedTxRefuses: every method of an ended attempt's handle fails
// with pgx.ErrTxClosed (large objects included, instead of panicking),
// and sends nothing: the handle has no connection here.
func TestClosedTxRefuses(t *testing.T) {
	tx := &Tx{}
	tx.End()
	ctx := context.Background()
	calls := []struct {
		name string
		call func() error
	}{
		{"Exec", func() error { _, err := tx.Exec(ctx, "select 1"); return err }},
		{"Query", func() error { _, err := tx.Query(ctx, "select 1"); return err }},
		{"QueryRow", func() error { return tx.QueryRow(ctx, "select 1").Scan() }},
		{"SendBatch", func() error { return tx.SendBatch(ctx, &pgx.Batch{}).Close() }},
		{"Begin", func() error { _, err := tx.Begin(ctx); return err }},
		{"Prepare", func() error { _, err := tx.Prepare(ctx, "s", "select 1"); return err }},
		{"CopyFrom", func() error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"a"}, pgx.CopyFromRows(nil))
			return err
		}},
		{"LargeObjects", func() error { lo := tx.LargeObjects(); _, err := lo.Create(ctx, 0); return err }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, pgx.ErrTxClosed) {
			t.Errorf("%s = %v, want pgx.ErrTxClosed", c.name, err)
		}
	}
	if c := tx.Conn(); c != nil {
		t.Errorf("Conn() = %v, want nil", c)
	}
}

func TestMayBeName(t *testing.T) {
	tests := []struct {
		sql  string
		want bool
	}{
		{"add_item", true},
		{"stmtcache_1f2e", true},
		{"get-user", true},
		{"checkpoint", true}, // a command: it loses nothing by going after BEGIN
		{"", false},
		{"select 1", false},
		{"select\n1", false},
		{"select\t1", false},
		{"vacuum;", false},
		{"get user", false}, // a name with white space is taken for SQL
	}
	for _, tt := range tests {
		if got := mayBeName(tt.sql); got != tt.want {
			t.Errorf("mayBeName(%q) = %v, want %v", tt.sql, got, tt.want)
		}
	}
}
