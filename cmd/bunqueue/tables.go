package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// The environment variables that the --prefix and --schema flags default
// to.
const (
	prefixVariable = "BUNQUEUE_TABLE_PREFIX"
	schemaVariable = "BUNQUEUE_TABLE_SCHEMA"
)

// dbFlags are the flags that say which database and which of bunqueue's
// tables in it a command works on: every command takes them.
type dbFlags struct {
	dsn, prefix, schema *string
}

// addDBFlags defines --dsn, --prefix and --schema on fs.
func addDBFlags(fs *flag.FlagSet) dbFlags {
	return dbFlags{
		dsn: fs.String("dsn", "", dsnUsage),
		prefix: fs.String("prefix", os.Getenv(prefixVariable),
			"the prefix of bunqueue's table names, as the app's Config.Tables.Prefix (default: $"+prefixVariable+", else bunqueue_)"),
		schema: fs.String("schema", os.Getenv(schemaVariable),
			"the PostgreSQL schema of bunqueue's tables, as the app's Config.Tables.Schema (default: $"+schemaVariable+", else the search_path's)"),
	}
}

// tables checks the flags' tables for a server (postgres, or MySQL and
// MariaDB) and returns them.
func (f dbFlags) tables(postgres bool) (bunqueue.Tables, tables.Names, error) {
	t := bunqueue.Tables{Prefix: *f.prefix, Schema: *f.schema}
	n, err := tables.New("Tables", t.Prefix, t.Schema)
	switch {
	case err != nil:
		return t, n, fmt.Errorf("--prefix or --schema: %s", strings.TrimPrefix(err.Error(), "bunqueue: "))
	case t.Schema != "" && !postgres:
		return t, n, fmt.Errorf("--schema %q: schemas are for PostgreSQL; on MySQL and MariaDB, use --prefix", t.Schema)
	}
	return t, n, nil
}

// tablesList says the tables Migrate creates, with their default names.
func tablesList() string { return bunqueue.Tables{}.String() }
