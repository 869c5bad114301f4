package dbtx

// Schema is the schema the queries are written for (schema.sql).
const Schema = `create table items (
	id   bigint primary key,
	name text   not null
)`

// Item is a row of items.
type Item struct {
	ID   int64
	Name string
}
