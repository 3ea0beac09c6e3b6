package dashboard

import (
	"fmt"
	"strconv"
	"time"

	"github.com/bunqueue/bunqueue"
)

// waitChart is a jobs queue's waits before start, a minute a bar: the
// 95th percentile of the jobs started in the minute, and over it, darker,
// their median, on a scale whose top is the hour's largest 95th
// percentile. A minute with no start has no value: not a wait of zero.
func waitChart(h bunqueue.QueueHistory) chart {
	p95, p50 := make([]int64, len(h.Started)), make([]int64, len(h.Started))
	for i, n := range h.Started {
		p95[i], p50[i] = -1, -1
		if n > 0 {
			p95[i], p50[i] = int64(h.WaitP95[i]), int64(h.WaitP50[i])
		}
	}
	label := func(v int64) string { return waitLabel(time.Duration(v)) }
	c := newChartTips("Wait p95", "wait", p95, h.From, label, func(i int) string {
		if h.Started[i] == 0 {
			return "no job started"
		}
		return fmt.Sprintf("%d started, waited p50 %s · p95 %s · max %s",
			h.Started[i], waitLabel(h.WaitP50[i]), waitLabel(h.WaitP95[i]), waitLabel(h.WaitMax[i]))
	})
	c.Empty = "no job started"
	if c.NoData {
		c.Max = "–"
	}
	if n := len(p95); n == 0 || p95[n-1] < 0 {
		c.Last = "–" // no start this minute: the latest wait is not now's
	}
	c.Summary = fmt.Sprintf("Wait before start, each minute's 95th percentile and, darker, median, over the last hour: at most %s, now %s", c.Max, c.Last)
	if c.NoData {
		c.Summary = "Wait before start over the last hour: no job started"
	}
	most := top(p95)
	c.Bars, c.Inner = bars(p95, most), bars(p50, most)
	return c
}

// waitLabel is a wait as the charts show it: in milliseconds up to a
// second (to a tenth under 10 ms), in seconds up to a minute, then in
// minutes and hours.
func waitLabel(d time.Duration) string {
	switch {
	case d <= 0:
		return "0 ms"
	case d < 10*time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + " s"
	case d < time.Hour:
		return strconv.FormatFloat(d.Minutes(), 'f', 1, 64) + " min"
	}
	return strconv.FormatFloat(d.Hours(), 'f', 1, 64) + " h"
}
