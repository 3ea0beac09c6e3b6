package dashboard

import (
	"strconv"
	"strings"
	"time"

	"github.com/bunqueue/bunqueue"
)

// limitsLabel says in words the limits in force on st's queue, as the
// queues table's Limits column shows them: "2 at once; 1 at once per
// customer_id; 50 per second", or "none". A jobs queue's key is its jobs'
// EnqueueOpts.LimitKey: "per limit key".
func limitsLabel(st bunqueue.QueueStats) string {
	var parts []string
	perKey := " per " + st.KeyColumn
	if st.Kind == bunqueue.QueueKindJobs {
		perKey = " per limit key"
	}
	if st.GlobalLimit > 0 {
		parts = append(parts, strconv.Itoa(st.GlobalLimit)+" at once")
	}
	if st.KeyLimit > 0 {
		parts = append(parts, strconv.Itoa(st.KeyLimit)+" at once"+perKey)
	}
	if st.RateLimit.N > 0 {
		parts = append(parts, rateLabel(st.RateLimit))
	}
	if st.KeyRate.N > 0 {
		parts = append(parts, rateLabel(st.KeyRate)+perKey)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// rateLabel says r in words: "50 per second", "3 per 10s".
func rateLabel(r bunqueue.Rate) string {
	n := strconv.Itoa(r.N)
	switch r.Per {
	case time.Second:
		return n + " per second"
	case time.Minute:
		return n + " per minute"
	case time.Hour:
		return n + " per hour"
	}
	return n + " per " + r.Per.String()
}
