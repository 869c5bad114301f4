package formation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// inRecovery asks the server at dsn whether it is in recovery, that is a standby.
func inRecovery(ctx context.Context, dsn string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return false, err
	}
	res := conn.ExecParams(ctx, "SELECT pg_is_in_recovery()::text", nil, nil, nil, nil).Read()
	if err := errors.Join(res.Err, conn.Close(ctx)); err != nil {
		return false, err
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		return false, fmt.Errorf("pg_is_in_recovery(): %d rows", len(res.Rows))
	}
	return string(res.Rows[0][0]) == "true", nil
}
