module github.com/pgtx-go/pgtx/pgtxgorm

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/pgtx-go/pgtx v1.0.0
	github.com/pgtx-go/pgtx/pgtxsql v1.0.0
	go.uber.org/goleak v1.3.0
	gorm.io/driver/postgres v1.6.3
	gorm.io/gorm v1.31.2
)

require (
	github.com/jackc/pgerrcode v0.0.0-20250907135507-afb5586c32a6 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

replace (
	github.com/pgtx-go/pgtx => ../
	github.com/pgtx-go/pgtx/pgtxsql => ../pgtxsql
)
