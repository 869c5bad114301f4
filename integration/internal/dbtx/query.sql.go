package dbtx

import (
	"context"
)

const countItems = `-- name: CountItems :one
select count(*) from items
`

// CountItems counts the items.
func (q *Queries) CountItems(ctx context.Context) (int64, error) {
	row := q.db.QueryRow(ctx, countItems)
	var count int64
	err := row.Scan(&count)
	return count, err
}

const createItem = `-- name: CreateItem :one
insert into items (id, name) values ($1, $2) returning id, name
`

// CreateItemParams are the parameters of CreateItem.
type CreateItemParams struct {
	ID   int64
	Name string
}

// CreateItem inserts an item and returns it.
func (q *Queries) CreateItem(ctx context.Context, arg CreateItemParams) (Item, error) {
	row := q.db.QueryRow(ctx, createItem, arg.ID, arg.Name)
	var i Item
	err := row.Scan(&i.ID, &i.Name)
	return i, err
}

const getItem = `-- name: GetItem :one
select id, name from items where id = $1
`

// GetItem returns the item with id.
func (q *Queries) GetItem(ctx context.Context, id int64) (Item, error) {
	row := q.db.QueryRow(ctx, getItem, id)
	var i Item
	err := row.Scan(&i.ID, &i.Name)
	return i, err
}

const listItems = `-- name: ListItems :many
select id, name from items order by id
`

// ListItems returns every item, by id.
func (q *Queries) ListItems(ctx context.Context) ([]Item, error) {
	rows, err := q.db.Query(ctx, listItems)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var items []Item
	for rows.Next() {
		var i Item
		if err := rows.Scan(&i.ID, &i.Name); err != nil {
			return nil, err
		}
		items = append(items, i)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return items, nil
}

const renameItem = `-- name: RenameItem :exec
update items set name = $2 where id = $1
`

// RenameItemParams are the parameters of RenameItem.
type RenameItemParams struct {
	ID   int64
	Name string
}

// RenameItem renames an item.
func (q *Queries) RenameItem(ctx context.Context, arg RenameItemParams) error {
	_, err := q.db.Exec(ctx, renameItem, arg.ID, arg.Name)
	return err
}

// InsertItemsParams are the rows of InsertItems.
type InsertItemsParams struct {
	ID   int64
	Name string
}
