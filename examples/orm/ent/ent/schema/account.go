// Package schema holds the example's ent schema.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Account is a bank account: an id and a balance, never set below 0.
type Account struct {
	ent.Schema
}

// Fields of the Account.
func (Account) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("balance").NonNegative(),
	}
}
