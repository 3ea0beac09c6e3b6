package dashboard

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/bunqueue/bunqueue"
)

// The size of a chart's drawing, in SVG user units (CSS pixels): a slot
// of slotW units a minute, a plot plotH units high above the baseline.
const (
	slotW  = 4
	plotH  = 44
	chartW = slotW * bunqueue.HistoryMinutes
	chartH = plotH + 4
	baseY  = chartH - 1 // the baseline's y
)

// chart is one small server-rendered SVG chart of a series a minute a
// slot, template "chart" draws it.
type chart struct {
	Title   string // what it shows, such as "Processed per minute"
	Class   string // "processed", "failed" or "depth", for the style
	Summary string // the chart's tooltip: the series in a sentence
	Max     string // the top of the scale
	Last    string // the latest value
	From    string // the first minute, "15:04 UTC"
	To      string // the last minute
	Bars    []mark // a bar per minute with a count above zero
	Inner   []mark // bars drawn over Bars, darker: the waits' medians
	Line    string // the depth's path, its gaps left open
	Dot     *mark  // the depth's latest point (X, Y), nil without one
	Slots   []mark // a column per minute, under its tooltip
	NoData  bool   // no value at all: nothing drawn
	Empty   string // what the chart says when NoData, "no data yet"
	W, H    int
	BaseY   int // the baseline's y, zero
	TopY    int // the y of Max
}

// mark is a rectangle of a chart, with its tooltip.
type mark struct {
	X, Y, W, H int
	Title      string
}

// queueCharts are one queue's charts.
type queueCharts struct {
	Queue  string
	Charts []chart
	// Fleet says that the charts are the whole fleet's, and Toggle is
	// the link to the other scope ("" for none): the section's heading
	// reads them from the first queue's.
	Fleet  bool
	Toggle template.URL
}

// chartsOf returns the charts of each queue's history, toggle the link
// to the history of the other scope ("" for none).
func chartsOf(hist []QueueHistory, toggle template.URL) []queueCharts {
	out := make([]queueCharts, 0, len(hist))
	for _, qh := range hist {
		depth := make([]int64, len(qh.Depth))
		for i, d := range qh.Depth {
			depth[i] = int64(d)
		}
		charts := []chart{
			countChart("Processed per minute", "processed", "processed", qh.Processed, qh.From),
			countChart("Failed per minute", "failed", "failed", qh.Failed, qh.From),
			depthChart(depth, qh.From),
		}
		if qh.Kind == bunqueue.QueueKindJobs { // a table's rows have no due time
			charts = append(charts, waitChart(qh.QueueHistory))
		}
		out = append(out, queueCharts{Queue: qh.Queue, Charts: charts, Fleet: qh.Fleet, Toggle: toggle})
	}
	return out
}

// newChart returns a chart of values, one a minute from from on, with
// its scale and tooltips; a value below zero is no value. noun names a
// value in the tooltips ("processed": "3 processed").
func newChart(title, class, noun string, values []int64, from time.Time, label func(int64) string) chart {
	return newChartTips(title, class, values, from, label, func(i int) string {
		if values[i] < 0 {
			return "no value"
		}
		return label(values[i]) + " " + noun
	})
}

// newChartTips is newChart with the tooltip of minute i, after its
// time, from tip.
func newChartTips(title, class string, values []int64, from time.Time, label func(int64) string, tip func(i int) string) chart {
	c := chart{Title: title, Class: class, W: chartW, H: chartH, BaseY: baseY, TopY: baseY - plotH, NoData: true, Empty: "no data yet"}
	last, top := int64(-1), int64(0)
	for _, v := range values {
		if v >= 0 {
			c.NoData, last, top = false, v, max(top, v)
		}
	}
	c.Max, c.Last = label(top), "–"
	if last >= 0 {
		c.Last = label(last)
	}
	if len(values) > 0 {
		c.From, c.To = clock(from), clock(from.Add(time.Duration(len(values)-1)*time.Minute))
	}
	for i := range values {
		c.Slots = append(c.Slots, mark{X: i * slotW, W: slotW, H: chartH, Title: clock(from.Add(time.Duration(i)*time.Minute)) + ": " + tip(i)})
	}
	c.Summary = fmt.Sprintf("%s over the last hour: at most %s, now %s", title, c.Max, c.Last)
	if c.NoData {
		c.Summary = title + " over the last hour: no value yet"
	}
	return c
}

// countChart is a bar chart of counts per minute.
func countChart(title, class, noun string, values []int64, from time.Time) chart {
	c := newChart(title, class, noun, values, from, func(v int64) string { return strconv.FormatInt(v, 10) })
	c.Bars = bars(values, top(values))
	return c
}

// bars returns a bar for each value above zero, on a scale whose top is
// top.
func bars(values []int64, top int64) []mark {
	var out []mark
	for i, v := range values {
		if v > 0 {
			h := height(v, top)
			out = append(out, mark{X: i*slotW + 1, Y: baseY - h, W: slotW - 1, H: h})
		}
	}
	return out
}

// top is the largest of values, zero or more.
func top(values []int64) int64 {
	t := int64(0)
	for _, v := range values {
		t = max(t, v)
	}
	return t
}

// depthChart is a line of the depths, broken where a minute has none
// (below zero).
func depthChart(values []int64, from time.Time) chart {
	c := newChart("Depth", "depth", "waiting", values, from, func(v int64) string { return depthLabel(int(v)) })
	most := top(values)
	var b strings.Builder
	for i, v := range values {
		if v < 0 {
			continue
		}
		x, y := i*slotW+slotW/2, baseY-height(v, most) // the minute's middle
		c.Dot = &mark{X: x, Y: y}
		start := i == 0 || values[i-1] < 0
		switch {
		case start && (i+1 == len(values) || values[i+1] < 0):
			fmt.Fprintf(&b, "M%d %dh%d", x-slotW/2, y, slotW) // a lone minute: a tick
		case start:
			fmt.Fprintf(&b, "M%d %d", x, y)
		default:
			fmt.Fprintf(&b, "L%d %d", x, y)
		}
	}
	c.Line = b.String()
	return c
}

// height is v's height on a scale whose top is top: at least one unit
// for a value above zero, so that it shows.
func height(v, top int64) int {
	if v <= 0 || top <= 0 {
		return 0
	}
	return max(1, int((v*plotH+top/2)/top))
}

// clock is t's minute, "15:04 UTC".
func clock(t time.Time) string { return t.UTC().Format("15:04") + " UTC" }

// depthLabel is a depth as the page shows it: "?" when unknown, "10000+"
// at the cap of the count.
func depthLabel(n int) string {
	switch {
	case n < 0:
		return "?"
	case n >= bunqueue.QueueDepthLimit:
		return strconv.Itoa(n) + "+"
	}
	return strconv.Itoa(n)
}
