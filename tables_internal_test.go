package bunqueue

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The tables Migrate creates are one list, said the same way in Tables'
// doc comment and in docs/jobs.md (the command-line tool's help and
// docs/cli.md are checked against it in cmd/bunqueue).
func TestTablesOneList(t *testing.T) {
	names := Tables{}.Names()
	src, err := os.ReadFile("tables.go")
	require.NoError(t, err)
	doc := string(src)[:strings.Index(string(src), "type Tables struct")]
	var listed []string
	for _, line := range strings.Split(doc, "\n") {
		if f := strings.Fields(strings.TrimPrefix(line, "//")); len(f) > 1 && strings.HasPrefix(f[0], "bunqueue_") && strings.HasPrefix(line, "//\t") {
			listed = append(listed, f[0])
		}
	}
	require.Equal(t, names, listed, "Tables' doc comment")
	docs, err := os.ReadFile("docs/jobs.md")
	require.NoError(t, err)
	require.Contains(t, strings.Join(strings.Fields(string(docs)), " "), "bunqueue's tables are, by default, "+Tables{}.String()+":", "docs/jobs.md")
}
