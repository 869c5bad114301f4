// Package ent is the client that ent generates from ./schema: go generate
// in this directory makes it again.
package ent

//go:generate env GOWORK=off go run -mod=mod entgo.io/ent/cmd/ent generate --feature sql/execquery ./schema
