package signal

import (
	"slices"
	"strings"
	"testing"
)

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []Message{
		{Kind: KindJobs, Queue: "default"},
		{Kind: KindRows, Queue: `emails "eu" ü`},
		{Kind: "control"},
	} {
		p, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(p)
		if err != nil || got != m {
			t.Errorf("Decode(%q) = %+v, %v; want %+v", p, got, err, m)
		}
	}
}

func TestMessageRefused(t *testing.T) {
	if _, err := (Message{Kind: KindRows, Queue: strings.Repeat("q", MaxPayload)}).Encode(); err == nil {
		t.Error("a payload longer than NOTIFY takes was encoded")
	}
	for _, p := range []string{"", "queue default", `{"queue":"default"}`} {
		if _, err := Decode(p); err == nil {
			t.Errorf("Decode(%q) read a message", p)
		}
	}
}

func TestChannel(t *testing.T) {
	if got := Channel("public", "bunqueue_jobs"); got != "public.bunqueue_jobs" {
		t.Errorf("Channel(public) = %q", got)
	}
	long := strings.Repeat("s", 63)
	a, b := Channel(long, "bunqueue_jobs"), Channel(long+"x", "bunqueue_jobs")
	if len(a) > maxChannel || len(b) > maxChannel || a == b {
		t.Errorf("long schemas: %q and %q", a, b)
	}
}

func TestHub(t *testing.T) {
	var h Hub
	var jobs, rows []Message
	unsub := h.Subscribe(KindJobs, func(m Message) { jobs = append(jobs, m) })
	h.Subscribe(KindRows, func(m Message) { rows = append(rows, m) })

	if h.Listening() {
		t.Error("listening before Began")
	}
	h.Began()
	if !h.Listening() {
		t.Error("not listening after Began")
	}
	for _, p := range []string{`{"kind":"jobs","queue":"a"}`, `{"kind":"rows","queue":"t"}`, `{"kind":"later","queue":"a"}`} {
		if err := h.Deliver(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Deliver("not json"); err == nil {
		t.Error("an unreadable payload was delivered")
	}
	unsub()
	if err := h.Deliver(`{"kind":"jobs","queue":"b"}`); err != nil {
		t.Fatal(err)
	}
	h.Ended()
	if h.Listening() {
		t.Error("listening after Ended")
	}
	wantJobs := []Message{{Kind: KindJobs}, {Kind: KindJobs, Queue: "a"}}
	wantRows := []Message{{Kind: KindRows}, {Kind: KindRows, Queue: "t"}}
	if !slices.Equal(jobs, wantJobs) || !slices.Equal(rows, wantRows) {
		t.Errorf("jobs %+v, rows %+v; want %+v, %+v", jobs, rows, wantJobs, wantRows)
	}
}
