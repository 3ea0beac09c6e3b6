package browsertest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
)

// focusedJS describes the focused element, and whether it shows that it
// has the focus: it matches :focus-visible and has an outline.
const focusedJS = `(() => {
  const e = document.activeElement;
  if (!e || e === document.body) { return "none"; }
  const shown = e.matches(":focus-visible") && getComputedStyle(e).outlineStyle !== "none";
  const name = e.id || (e.tagName === "BUTTON" ? e.value || e.textContent.trim() : e.name) || e.textContent.trim();
  return e.tagName.toLowerCase() + ":" + name + (shown ? "" : " (focus not shown)");
})()`

// tabTo presses Tab until the focused element is want (a focusedJS
// description), at most max times, and returns what it focused on the
// way, want last.
func tabTo(t *testing.T, b *tab, want string, max int) []string {
	t.Helper()
	var seen []string
	for range max {
		b.do(chromedp.KeyEvent(kb.Tab))
		seen = append(seen, evalIn[string](b, focusedJS))
		if seen[len(seen)-1] == want {
			return seen
		}
	}
	t.Fatalf("%d Tabs never reached %s; they focused %s", max, want, strings.Join(seen, ", "))
	return nil
}

// The keyboard, in headless Chromium: from the job browser's load, Tab
// goes through the navigation, the tabs, the filter form, the actions on
// the selection and then the jobs, each showing its focus; Enter on a
// job's link opens its page, and Enter on its Run now button does it.
func TestKeyboardInBrowser(t *testing.T) {
	f := setupJobs(t, &dashboard.Options{AllowActions: true})
	b := openTab(t)
	b.open(fmt.Sprintf("%s/ops/jobs?state=scheduled&queue=%s", f.srv.URL, f.queue), "table.joblist")
	rule := evalIn[bool](b, `Array.from(document.styleSheets).some(s => Array.from(s.cssRules).some(r => (r.selectorText || "").includes(":focus-visible")))`)
	require.True(t, rule, "the style sheet has a :focus-visible rule")

	link := fmt.Sprintf("a:%d", f.sched)
	seen := tabTo(t, b, link, 40)
	t.Logf("Tab order: %s", strings.Join(seen, ", "))
	for _, s := range seen {
		require.NotContains(t, s, "focus not shown")
	}
	at := func(s string) int {
		i := slices.Index(seen, s)
		require.GreaterOrEqual(t, i, 0, "Tab reaches %s: %s", s, strings.Join(seen, ", "))
		return i
	}
	require.Less(t, at("a:Jobs"), at("a:scheduled"), "the navigation, then the tabs")
	require.Less(t, at("a:scheduled"), at("input:queue"), "the tabs, then the filter")
	require.Less(t, at("input:queue"), at("button:Filter"))
	require.Less(t, at("button:Filter"), at("button:run_now"), "the filter, then the actions")
	require.Less(t, at("button:run_now"), at("input:select-all"))
	require.Less(t, at("input:select-all"), at(link), "the actions, then the jobs")
	screenshot(t, b.ctx, "keyboard-focus")

	b.do(chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.ID("args")))
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(loc, fmt.Sprintf("/ops/job?id=%d", f.sched)), loc)

	tabTo(t, b, "button:run_now", 20)
	b.do(chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.ID("summary")))
	require.Equal(t, "Done for every job.", b.text("#summary"))
	require.Equal(t, bunqueue.JobStatePending, f.state(t, f.sched))
	b.check()
}
