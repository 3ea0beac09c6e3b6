package sqldialect

// Savepoint returns the statement that takes the savepoint name, the same
// on every server bunqueue supports.
func Savepoint(name string) string { return "SAVEPOINT " + name }
