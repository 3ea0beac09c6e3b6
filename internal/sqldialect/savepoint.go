package sqldialect

// Savepoint returns the statement that takes the savepoint name, the same
// on every server bunqueue supports.
func Savepoint(name string) string { return "SAVEPOINT " + name }

// RollbackTo returns the statement that undoes what ran since the
// savepoint name was taken, keeping the savepoint and the locks taken
// before it; the same on every server bunqueue supports.
func RollbackTo(name string) string { return "ROLLBACK TO SAVEPOINT " + name }
