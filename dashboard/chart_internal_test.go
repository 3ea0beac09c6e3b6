package dashboard

import (
	"bytes"
	"html/template"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
)

var chartFrom = time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)

// renderChart draws c with the page's template "chart".
func renderChart(t *testing.T, name string, v any) string {
	t.Helper()
	pages := template.Must(template.New("").Funcs(funcs).ParseFS(templateFiles, "templates/*.html"))
	var b bytes.Buffer
	require.NoError(t, pages.ExecuteTemplate(&b, name, v))
	return b.String()
}

// A count a minute is a bar of a height in proportion to the hour's
// largest, each minute has its tooltip, and the scale says max and now.
func TestCountChart(t *testing.T) {
	t.Parallel()
	c := countChart("Processed per minute", "processed", "processed", []int64{0, 2, 0, 4}, chartFrom)
	require.False(t, c.NoData)
	require.Equal(t, []mark{{X: 5, Y: 25, W: 3, H: 22}, {X: 13, Y: 3, W: 3, H: 44}}, c.Bars)
	require.Equal(t, [2]string{"4", "4"}, [2]string{c.Max, c.Last})
	require.Equal(t, [2]string{"16:00 UTC", "16:03 UTC"}, [2]string{c.From, c.To})
	require.Len(t, c.Slots, 4)
	require.Equal(t, mark{X: 4, W: 4, H: chartH, Title: "16:01 UTC: 2 processed"}, c.Slots[1])
	require.Equal(t, "Processed per minute over the last hour: at most 4, now 4", c.Summary)

	svg := renderChart(t, "chart", c)
	require.Contains(t, svg, `<rect class="bar" x="5" y="25" width="3" height="22"></rect>`)
	require.Contains(t, svg, `<title>16:01 UTC: 2 processed</title>`)
	require.Contains(t, svg, `max 4 · now 4`)
	require.NotContains(t, svg, "no data yet")

	small := countChart("Failed per minute", "failed", "failed", []int64{1, 1000}, chartFrom)
	require.Equal(t, 1, small.Bars[0].H, "a count above zero shows, however small")
}

// Depths are a line through each minute's middle, broken where a minute
// has no sample; a lone sample is a tick.
func TestDepthChart(t *testing.T) {
	t.Parallel()
	c := depthChart([]int64{-1, 3, 6, -1, 2}, chartFrom)
	require.Equal(t, "M6 25L10 3M16 32h4", c.Line)
	require.Empty(t, c.Bars)
	require.Equal(t, &mark{X: 18, Y: 32}, c.Dot, "the latest depth")
	require.Equal(t, [2]string{"6", "2"}, [2]string{c.Max, c.Last})
	require.Equal(t, "16:00 UTC: no value", c.Slots[0].Title)
	require.Equal(t, "16:02 UTC: 6 waiting", c.Slots[2].Title)

	capped := depthChart([]int64{bunqueue.QueueDepthLimit}, chartFrom)
	require.Equal(t, "10000+", capped.Max, "a depth at the cap of the count says so")
	require.Contains(t, renderChart(t, "chart", c), `<path class="line" d="M6 25L10 3M16 32h4"></path>`)
}

// An empty series, or one of no samples, draws nothing and says so; an
// hour of zeros draws no bar and no division by zero.
func TestChartEmptyAndZero(t *testing.T) {
	t.Parallel()
	for _, c := range []chart{
		countChart("Processed per minute", "processed", "processed", nil, chartFrom),
		depthChart(nil, chartFrom),
		depthChart([]int64{-1, -1, -1}, chartFrom),
	} {
		require.True(t, c.NoData)
		require.Empty(t, c.Bars)
		require.Empty(t, c.Line)
		require.Nil(t, c.Dot)
		require.Equal(t, "–", c.Last)
		svg := renderChart(t, "chart", c)
		require.Contains(t, svg, "no data yet")
		require.Contains(t, svg, "no value yet")
	}

	zeros := countChart("Failed per minute", "failed", "failed", make([]int64, bunqueue.HistoryMinutes), chartFrom)
	require.False(t, zeros.NoData)
	require.Empty(t, zeros.Bars)
	require.Equal(t, [2]string{"0", "0"}, [2]string{zeros.Max, zeros.Last})
	require.Len(t, zeros.Slots, bunqueue.HistoryMinutes)
	require.Equal(t, "16:59 UTC", zeros.To)
	svg := renderChart(t, "chart", zeros)
	require.NotContains(t, svg, "NaN")
	require.NotContains(t, svg, "no data yet")
	require.Equal(t, bunqueue.HistoryMinutes, strings.Count(svg, `<rect x=`))

	flat := depthChart(make([]int64, 3), chartFrom)
	require.Equal(t, "M2 47L6 47L10 47", flat.Line, "a depth of zero lies on the baseline")
}

// A queue's name is the app's, shown as text in the charts too.
func TestChartsEscape(t *testing.T) {
	t.Parallel()
	name := `<script>alert(1)</script>"`
	qh := QueueHistory{QueueHistory: bunqueue.QueueHistory{Queue: name, From: chartFrom,
		Processed: make([]int64, bunqueue.HistoryMinutes), Failed: make([]int64, bunqueue.HistoryMinutes)}, Depth: make([]int, bunqueue.HistoryMinutes)}
	html := renderChart(t, "charts", view{Charts: chartsOf([]QueueHistory{qh}, "")})
	require.NotContains(t, html, "<script>")
	require.Contains(t, html, "&lt;script&gt;alert(1)&lt;/script&gt;&#34;")
	require.Equal(t, 3, strings.Count(html, "<svg "), "three charts a queue")
}

// A jobs queue has a fourth chart, of its waits before start; a queue
// over a table has none.
func TestChartsWaitForJobsQueuesOnly(t *testing.T) {
	t.Parallel()
	hist := func(kind bunqueue.QueueKind) QueueHistory {
		return QueueHistory{QueueHistory: waitHistory(nil), Kind: kind, Depth: make([]int, bunqueue.HistoryMinutes)}
	}
	charts := chartsOf([]QueueHistory{hist(bunqueue.QueueKindJobs), hist(bunqueue.QueueKindTable)}, "")
	require.Len(t, charts[0].Charts, 4)
	require.Equal(t, "wait", charts[0].Charts[3].Class)
	require.Len(t, charts[1].Charts, 3, "a table's rows have no due time")
}

// waitHistory is an hour of a jobs queue whose minutes from the first
// started the jobs of starts, each with waits p50, p95 and max.
func waitHistory(starts []int64, waits ...[3]time.Duration) bunqueue.QueueHistory {
	h := bunqueue.QueueHistory{Queue: "q", From: chartFrom, Started: make([]int64, bunqueue.HistoryMinutes),
		WaitP50: make([]time.Duration, bunqueue.HistoryMinutes), WaitP95: make([]time.Duration, bunqueue.HistoryMinutes), WaitMax: make([]time.Duration, bunqueue.HistoryMinutes)}
	for i, n := range starts {
		h.Started[i] = n
		h.WaitP50[i], h.WaitP95[i], h.WaitMax[i] = waits[i][0], waits[i][1], waits[i][2]
	}
	return h
}

// The waits chart: a bar of the minute's p95 with its p50 over it, on a
// scale of the hour's largest p95, in readable units; a minute with no
// start is no bar and says so, a start with no wait is a zero.
func TestWaitChart(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	c := waitChart(waitHistory([]int64{3, 0, 1, 2},
		[3]time.Duration{100 * ms, 400 * ms, 1500 * ms}, [3]time.Duration{}, [3]time.Duration{}, [3]time.Duration{150 * ms, 200 * ms, 250 * ms}))
	require.False(t, c.NoData)
	require.Equal(t, []mark{{X: 1, Y: 3, W: 3, H: 44}, {X: 13, Y: 25, W: 3, H: 22}}, c.Bars, "the p95s: 400 ms is the top")
	require.Equal(t, []mark{{X: 1, Y: 36, W: 3, H: 11}, {X: 13, Y: 30, W: 3, H: 17}}, c.Inner, "the p50s, on the same scale")
	require.Equal(t, [2]string{"400 ms", "–"}, [2]string{c.Max, c.Last}, "no start in the last minute")
	require.Equal(t, "16:00 UTC: 3 started, waited p50 100 ms · p95 400 ms · max 1.5 s", c.Slots[0].Title)
	require.Equal(t, "16:01 UTC: no job started", c.Slots[1].Title)
	require.Equal(t, "16:02 UTC: 1 started, waited p50 0 ms · p95 0 ms · max 0 ms", c.Slots[2].Title)
	require.Equal(t, "Wait before start, each minute's 95th percentile and, darker, median, over the last hour: at most 400 ms, now –", c.Summary)
	svg := renderChart(t, "chart", c)
	require.Contains(t, svg, `<rect class="bar inner" x="1" y="36" width="3" height="11"></rect>`)
	require.Contains(t, svg, `<figure class="chart chart-wait">`)

	starts := make([]int64, bunqueue.HistoryMinutes)
	starts[bunqueue.HistoryMinutes-1] = 1
	waits := make([][3]time.Duration, bunqueue.HistoryMinutes)
	waits[bunqueue.HistoryMinutes-1] = [3]time.Duration{12 * ms, 30 * ms, 30 * ms}
	now := waitChart(waitHistory(starts, waits...))
	require.Equal(t, [2]string{"30 ms", "30 ms"}, [2]string{now.Max, now.Last}, "a start this minute")

	none := waitChart(waitHistory(nil))
	require.True(t, none.NoData, "no job started in the hour")
	require.Empty(t, none.Bars)
	require.Equal(t, [2]string{"–", "–"}, [2]string{none.Max, none.Last})
	require.Equal(t, "Wait before start over the last hour: no job started", none.Summary)
	require.Contains(t, renderChart(t, "chart", none), ">no job started</text>")
	require.Contains(t, renderChart(t, "chart", none), `<span class="chart-title">Wait p95</span> <span class="chart-scale">max – · now –</span>`)
}

func TestWaitLabel(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0 ms", 400 * time.Microsecond: "0.4 ms", 9500 * time.Microsecond: "9.5 ms", 512 * time.Millisecond: "512 ms",
		1500 * time.Millisecond: "1.5 s", 42 * time.Second: "42 s", 10 * time.Minute: "10.0 min", 90 * time.Minute: "1.5 h",
	} {
		require.Equal(t, want, waitLabel(d), "%v", d)
	}
}

// The dashboard keeps the last depth it read in each minute, and tells
// the minutes it read none.
func TestDepthSamples(t *testing.T) {
	t.Parallel()
	d := depths{}
	at := chartFrom.Add(30 * time.Second)
	d.record([]bunqueue.QueueStats{{Name: "q", Depth: 5}, {Name: "bad", Depth: -1}}, []int{0, 0}, at)
	d.record([]bunqueue.QueueStats{{Name: "q", Depth: 7}}, []int{0}, at.Add(10*time.Second))
	d.record([]bunqueue.QueueStats{{Name: "q", Depth: 2}}, []int{0}, at.Add(2*time.Minute))
	s := d.series("q", chartFrom)
	require.Equal(t, []int{7, -1, 2, -1}, s[:4])
	require.Len(t, s, bunqueue.HistoryMinutes)
	require.Equal(t, -1, d.series("bad", chartFrom)[0], "a failed count is no sample")
	later := d.series("q", chartFrom.Add(time.Hour))
	require.Equal(t, -1, later[0], "a sample an hour old is gone")
}
