package bunqueue

import (
	"time"

	"github.com/bunqueue/bunqueue/internal/histsql"
)

// fleetSeries adds history rows up into the points of a series of n
// buckets of step seconds from from (Unix seconds).
type fleetSeries struct {
	from, step int64
	counts     []histsql.Counts
	// depths are each point's largest depth by queue, to be summed.
	depths []map[string]int64
}

func newFleetSeries(from, step int64, n int) *fleetSeries {
	return &fleetSeries{from: from, step: step, counts: make([]histsql.Counts, n), depths: make([]map[string]int64, n)}
}

// add adds r to the point that holds its bucket; a row outside the
// series is left out.
func (s *fleetSeries) add(r *histsql.Row) {
	i := (r.Bucket - s.from) / s.step
	if r.Bucket < s.from || i >= int64(len(s.counts)) {
		return
	}
	s.counts[i].Merge(&r.Counts)
	if r.Depth < 0 {
		return
	}
	if s.depths[i] == nil {
		s.depths[i] = map[string]int64{}
	}
	if d, ok := s.depths[i][r.Queue]; !ok || r.Depth > d {
		s.depths[i][r.Queue] = r.Depth
	}
}

// points returns the series' points, oldest first.
func (s *fleetSeries) points() []FleetPoint {
	out := make([]FleetPoint, len(s.counts))
	for i := range s.counts {
		c := &s.counts[i]
		longest := time.Duration(c.WaitMaxMicros) * time.Microsecond
		p := FleetPoint{At: time.Unix(s.from+int64(i)*s.step, 0).UTC(), Processed: c.Processed, Failed: c.Failed, Started: c.Started,
			Waits: c.Waits[:], WaitMax: longest, Depth: -1,
			WaitP50: histsql.WaitQuantile(&c.Waits, longest, 0.50), WaitP95: histsql.WaitQuantile(&c.Waits, longest, 0.95)}
		if s.depths[i] != nil {
			p.Depth = 0
			for _, d := range s.depths[i] {
				p.Depth += d
			}
		}
		out[i] = p
	}
	return out
}
