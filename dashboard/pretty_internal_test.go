package dashboard

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// prettyJSON keeps the keys' order and the numbers as written, and
// writes < as itself; what is not one JSON value is an error.
func TestPrettyJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"b":1,"a":[true,null,{}],"c":[]}`, "{\n  \"b\": 1,\n  \"a\": [\n    true,\n    null,\n    {}\n  ],\n  \"c\": []\n}"},
		{`{"n":12345678901234567890123,"f":1.50e3}`, "{\n  \"n\": 12345678901234567890123,\n  \"f\": 1.50e3\n}"},
		{`"\u003cb\u003e \\u003c \u0026"`, `"<b> \\u003c &"`},
		{`{"k":{"k":"v"}}`, "{\n  \"k\": {\n    \"k\": \"v\"\n  }\n}"},
		{` 7 `, `7`},
	} {
		got, err := prettyJSON([]byte(tc.in))
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, in := range []string{``, `{"a":`, `1 2`, `{"a" 1}`, "\xff"} {
		_, err := prettyJSON([]byte(in))
		require.Error(t, err, "%q", in)
	}
}

// traceID reads the trace id of a stored traceparent, and nothing else.
func TestTraceID(t *testing.T) {
	for in, want := range map[string]string{
		"traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n":            "4bf92f3577b34da6a3ce929d0e0e4736",
		"baggage=a\ntraceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n": "4bf92f3577b34da6a3ce929d0e0e4736",
		"traceparent=00-00000000000000000000000000000000-00f067aa0ba902b7-01":              "",
		"traceparent=00-<script>-00f067aa0ba902b7-01":                                      "",
		"": "",
	} {
		require.Equal(t, want, traceID([]byte(in)), in)
	}
}
