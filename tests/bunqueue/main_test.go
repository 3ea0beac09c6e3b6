package bunqueue_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(leaseWorkerEnv) != "" {
		// Re-executed by a kill test (lease_test.go) as a worker process.
		os.Exit(runLeaseWorkerProcess())
	}
	if os.Getenv(relWorkerEnv) != "" {
		// Re-executed by the reliability suite (reliability_sigkill_test.go).
		os.Exit(runRelWorkerProcess())
	}
	if os.Getenv(processChildEnv) != "" {
		// Re-executed by the registry's kill test (process_test.go).
		os.Exit(runProcessChild())
	}
	goleak.VerifyTestMain(m)
}
