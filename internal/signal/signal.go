// Package signal carries messages between the processes that share a
// jobs table: on PostgreSQL, as notifications (pg_notify in the sender's
// transaction, delivered when it commits) on a channel named after that
// table; elsewhere not at all.
//
// A message names a kind (what happened) and, for most kinds, a queue.
// Receivers ignore kinds they do not know, so a newer process may send
// kinds an older one does not read. A Hub hands the messages a listening
// connection receives to the subscribers of their kind.
//
// The package holds the SQL of the signals that runs through bun: the
// statement that sends (Send) and the read of the channel's schema
// (Schema). Listening is the Listener's, on a connection of its own.
//
// Signals is a client's side of them: its channel, the Hub of what its
// Listener receives (Listen runs the Listener until the client stops,
// calling it again after failures), the wake-ups of the queues that
// signals name (Wake), and the signals sent from the pool in the
// background (SendLater).
package signal

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// The kinds of message bunqueue sends.
const (
	// KindJobs: jobs were enqueued into the jobs queue Queue, due now.
	KindJobs = "jobs"
	// KindRows: the app says that rows may be waiting in the table queue
	// named Queue (Client.Notify).
	KindRows = "rows"
	// KindPause and KindResume: the queue named Queue was paused or
	// resumed (Client.PauseQueue, ResumeQueue).
	KindPause  = "pause"
	KindResume = "resume"
)

// MaxPayload is the longest payload PostgreSQL's NOTIFY takes, in bytes
// (its default build).
const MaxPayload = 7999

// Message is one signal. Its payload is its JSON encoding.
type Message struct {
	// Kind says what happened; see the Kind constants.
	Kind string `json:"kind"`
	// Queue is the queue it happened to. Empty in a message that a Hub
	// makes when listening begins: then any queue may have changed.
	Queue string `json:"queue,omitempty"`
}

// Encode returns m's payload. It fails only when the payload would be
// longer than MaxPayload.
func (m Message) Encode() (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	if len(b) > MaxPayload {
		return "", fmt.Errorf("a %s signal of queue %q is %d bytes long, more than NOTIFY takes (%d)", m.Kind, m.Queue, len(b), MaxPayload)
	}
	return string(b), nil
}

// Decode reads a payload that Encode made.
func Decode(payload string) (Message, error) {
	var m Message
	if err := json.Unmarshal([]byte(payload), &m); err != nil {
		return Message{}, fmt.Errorf("read a signal: %w", err)
	}
	if m.Kind == "" {
		return Message{}, errors.New("read a signal: it names no kind")
	}
	return m, nil
}

// maxChannel is the longest channel name PostgreSQL takes (NAMEDATALEN-1).
const maxChannel = 63

// Channel returns the channel of the processes that use the jobs table
// table in schema: "<schema>.<table>", or, where that is longer than a
// channel name may be, table and a hash of the schema. Notifications do
// not leave their database; the schema keeps apart the apps of one
// database that have jobs tables of their own.
func Channel(schema, table string) string {
	if ch := schema + "." + table; len(ch) <= maxChannel {
		return ch
	}
	sum := sha256.Sum256([]byte(schema))
	return table + "." + hex.EncodeToString(sum[:16])
}

// Hub hands messages to their kind's subscribers. Its zero value is
// ready to use and safe for concurrent use.
type Hub struct {
	mu   sync.Mutex
	subs map[string][]*subscriber

	listening atomic.Bool
}

type subscriber struct{ fn func(Message) }

// Subscribe calls fn with every message of kind from now on, until the
// returned function is called. fn runs on the listening goroutine, one
// message at a time: it must not block (hand slow work to a goroutine of
// its own). A message with no Queue means that messages of kind to any
// queue may have been missed (listening began, or began again after a
// lost connection): read what the messages would have said.
func (h *Hub) Subscribe(kind string, fn func(Message)) (unsubscribe func()) {
	s := &subscriber{fn: fn}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[string][]*subscriber{}
	}
	h.subs[kind] = append(h.subs[kind], s)
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		subs := h.subs[kind]
		for i, other := range subs {
			if other == s {
				h.subs[kind] = append(subs[:i:i], subs[i+1:]...)
				return
			}
		}
	}
}

// Deliver decodes payload and calls the subscribers of its kind. A
// payload it cannot read is an error, and reaches no subscriber.
func (h *Hub) Deliver(payload string) error {
	m, err := Decode(payload)
	if err != nil {
		return err
	}
	for _, s := range h.subscribers(m.Kind) {
		s.fn(m)
	}
	return nil
}

// Began records that listening has taken effect, and tells every
// subscriber that anything may have been missed before (a message of
// its kind with no Queue).
func (h *Hub) Began() {
	h.listening.Store(true)
	h.mu.Lock()
	kinds := make([]string, 0, len(h.subs))
	for kind := range h.subs {
		kinds = append(kinds, kind)
	}
	h.mu.Unlock()
	for _, kind := range kinds {
		for _, s := range h.subscribers(kind) {
			s.fn(Message{Kind: kind})
		}
	}
}

// Ended records that listening has stopped: messages sent from now on
// are missed until Began.
func (h *Hub) Ended() { h.listening.Store(false) }

// Listening reports whether messages are being received: between Began
// and Ended. A subscriber whose messages matter more than a poll may poll
// more often while it is false.
func (h *Hub) Listening() bool { return h.listening.Load() }

func (h *Hub) subscribers(kind string) []*subscriber {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*subscriber(nil), h.subs[kind]...)
}
