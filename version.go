package bunqueue

// version is reported as the instrumentation version of spans and metrics.
const version = "0.1.0"
