package bunqueue

import (
	"os"
	"strings"
	"testing"
)

// The library's go.mod lists what the library needs and nothing for its
// tests, examples or tools (those are modules of their own, see go.work):
// an app that imports bunqueue gets every module listed here in its own
// module graph, and scanners flag them all.
func TestModuleRequiresOnlyWhatTheLibraryUses(t *testing.T) {
	data, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, banned := range []string{
		"google.golang.org/grpc", "google.golang.org/protobuf", "go.opentelemetry.io/proto",
		"go.opentelemetry.io/otel/exporters", "go.opentelemetry.io/otel/sdk",
		"modernc.org/", "github.com/jackc/pgx", "go.uber.org/goleak", "github.com/chromedp",
	} {
		if strings.Contains(string(data), banned) {
			t.Errorf("go.mod requires %s, which the library does not import: move what needs it to a module of its own", banned)
		}
	}
}
