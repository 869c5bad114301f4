package pgtx

import (
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

// TestIDAtCommit: when COMMIT's write must read the id.
func TestIDAtCommit(t *testing.T) {
	tests := []struct {
		name                          string
		idRead, idNull, stale, notify bool
		want                          bool
	}{
		{"first write gave the id", true, false, false, false, false},
		{"first write gave the id, statements since", true, false, true, false, false},
		{"no id, nothing since: write-free", true, true, false, false, false},
		{"no id, statements since", true, true, true, false, true},
		{"id not read", false, false, false, false, true},
		{"a notification", true, false, false, true, true},
		{"no id, a notification", true, true, false, true, true},
	}
	for _, tt := range tests {
		at := &attemptTx{idRead: tt.idRead, idNull: tt.idNull, stale: tt.stale, notify: tt.notify}
		if got := at.idAtCommit(); got != tt.want {
			t.Errorf("%s: idAtCommit = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestClosedTxLargeObjectsRefuse: the large objects of an ended attempt
// fail with pgx.ErrTxClosed instead of panicking.
func TestClosedTxLargeObjectsRefuse(t *testing.T) {
	at := &attemptTx{}
	at.closed.Store(true)
	lo := at.LargeObjects()
	if _, err := lo.Create(t.Context(), 0); err != pgx.ErrTxClosed {
		t.Errorf("LargeObjects().Create = %v, want pgx.ErrTxClosed", err)
	}
	if c := at.Conn(); c != nil {
		t.Errorf("Conn() = %v, want nil", c)
	}
}
