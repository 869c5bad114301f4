// Code in the style sqlc generates; written by hand for this example.

package db

import (
	"github.com/jackc/pgx/v5/pgtype"
)

// Account is a row of the accounts table.
type Account struct {
	ID      int64
	Owner   string
	Balance int64
}

// Transfer is a row of the transfers table.
type Transfer struct {
	ID            int64
	FromAccountID int64
	ToAccountID   int64
	Amount        int64
	CreatedAt     pgtype.Timestamptz
}
