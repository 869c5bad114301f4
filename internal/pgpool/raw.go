package pgpool

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/pgtx-go/pgtx/internal/cancel"
)

// result is one simple query's answer: the rows of its last statement, in
// text, its command tag, or the server's error.
type result struct {
	cols []string
	rows [][]string
	tag  pgconn.CommandTag
	err  *pgconn.PgError
}

// simple sends queries in the simple protocol, each a Query message of its
// own, in one write, and reads their answers: one round trip, and each
// query answered by itself (a multi-statement query would fail whole on
// its first error, and Pgpool-II sends one to the primary whatever it
// holds). A server error is the query's; any other error is the
// connection's.
func simple(ctx context.Context, pgConn *pgconn.PgConn, queries ...string) ([]result, error) {
	fe := pgConn.Frontend()
	for _, q := range queries {
		fe.Send(&pgproto3.Query{String: q})
	}
	if err := fe.Flush(); err != nil {
		// As pgx does after a failed write: the connection is closed, so
		// that nothing takes it for a live one.
		ctx, stop := context.WithTimeout(context.Background(), cancel.DestroyWriteTimeout)
		defer stop()
		_ = pgConn.Close(ctx)
		return nil, err
	}
	out := make([]result, len(queries))
	for i := 0; i < len(queries); {
		msg, err := pgConn.ReceiveMessage(ctx)
		if err != nil {
			return nil, err
		}
		switch m := msg.(type) {
		case *pgproto3.RowDescription:
			out[i].rows = out[i].rows[:0]
			out[i].cols = out[i].cols[:0]
			for _, f := range m.Fields {
				out[i].cols = append(out[i].cols, string(f.Name))
			}
		case *pgproto3.DataRow:
			row := make([]string, len(m.Values))
			for j, v := range m.Values {
				row[j] = string(v)
			}
			out[i].rows = append(out[i].rows, row)
		case *pgproto3.CommandComplete:
			out[i].tag = pgconn.NewCommandTag(string(m.CommandTag))
		case *pgproto3.ErrorResponse:
			if out[i].err == nil {
				out[i].err = pgconn.ErrorResponseToPgError(m)
			}
		case *pgproto3.ReadyForQuery:
			i++
		}
	}
	return out, nil
}

// Result is a statement's answer: its command tag, or the server's error.
type Result struct {
	Tag pgconn.CommandTag
	Err error
}

// Run runs statements as [simple] does, each in a query of its own, in one
// write, and returns each one's answer; an error that is not a statement's
// is the connection's. Pgpool-II routes each query by itself, and answers
// each before it reads the next, whatever the nodes they go to.
func Run(ctx context.Context, pgConn *pgconn.PgConn, statements ...string) ([]Result, error) {
	res, err := simple(ctx, pgConn, statements...)
	if err != nil {
		return nil, err
	}
	out := make([]Result, len(res))
	for i, r := range res {
		out[i].Tag = r.tag
		if r.err != nil {
			out[i].Err = r.err
		}
	}
	return out, nil
}
