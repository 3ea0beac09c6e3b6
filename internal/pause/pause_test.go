package pause

import (
	"io"
	"log/slog"
	"testing"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/signal"
)

func TestSetAndSignal(t *testing.T) {
	a, b := &engine.Queue{Name: "a", Gate: engine.NewGate()}, &engine.Queue{Name: "b", Gate: engine.NewGate()}
	p := &Flags{names: []string{"a", "b"}, queues: map[string][]*engine.Queue{"a": {a}, "b": {b}},
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	p.Apply([]bool{true, false})
	if !a.Gate.Paused() || b.Gate.Paused() {
		t.Fatalf("Apply(true, false): a paused %v, b paused %v", a.Gate.Paused(), b.Gate.Paused())
	}
	p.Signal(false)(signal.Message{Kind: signal.KindResume}) // names no queue: nothing
	if !a.Gate.Paused() {
		t.Error("a signal that names no queue resumed a")
	}
	p.Signal(false)(Message("a", false))
	if a.Gate.Paused() {
		t.Error("the resume signal of a left it paused")
	}
	(*Flags)(nil).Set("a", true) // a client not started
}

func TestOpAndMessage(t *testing.T) {
	if Op(true) != "PauseQueue" || Op(false) != "ResumeQueue" {
		t.Errorf("Op: %q, %q", Op(true), Op(false))
	}
	if m := Message("q", true); m != (signal.Message{Kind: signal.KindPause, Queue: "q"}) {
		t.Errorf("Message(q, true) = %+v", m)
	}
	if m := Message("q", false); m != (signal.Message{Kind: signal.KindResume, Queue: "q"}) {
		t.Errorf("Message(q, false) = %+v", m)
	}
}
