package browsertest

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// tab is a headless Chromium tab of a test, with the watch of its
// console and requests (startBrowser).
type tab struct {
	t     *testing.T
	ctx   context.Context
	check func()
}

// openTab starts Chromium for t, or skips t, saying why, where there is
// none.
func openTab(t *testing.T) *tab {
	t.Helper()
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (install the Debian package chromium, or set BUNQUEUE_CHROMIUM): the browser test does not run")
	}
	ctx, check := startBrowser(t, browser)
	return &tab{t: t, ctx: ctx, check: check}
}

// do runs steps, failing the test on an error.
func (b *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(b.ctx, steps...))
}

// open loads url, waits for the element sel, and returns the page's
// HTTP status.
func (b *tab) open(url, sel string) int64 {
	b.t.Helper()
	res, err := chromedp.Run(b.ctx, chromedp.NavigateResponse(url))
	require.NoError(b.t, err, url)
	b.do(chromedp.WaitVisible(chromedp.CSS(sel)))
	return res.Status
}

// submit clicks the button sel, accepting the confirmation it asks for
// (whose question asked then returns), and waits for the element next of
// the page that answers.
func (b *tab) submit(button, next string) {
	b.t.Helper()
	b.do(
		chromedp.Evaluate[chromedp.Void](`sessionStorage.setItem("asked", ""); window.confirm = (q) => { sessionStorage.setItem("asked", q); return true; }`),
		chromedp.Click(chromedp.CSS(button)),
		chromedp.WaitVisible(chromedp.CSS(next)),
	)
}

// text returns the text of the element sel.
func (b *tab) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(b.t, err, sel)
	return s
}

// count returns how many elements sel selects.
func (b *tab) count(sel string) int {
	b.t.Helper()
	return evalIn[int](b, fmt.Sprintf(`document.querySelectorAll(%q).length`, sel))
}

// attrs returns the attribute name of each element sel selects, joined
// with commas.
func (b *tab) attrs(sel, name string) string {
	b.t.Helper()
	return evalIn[string](b, fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map(e => e.getAttribute(%q)).join(",")`, sel, name))
}

// evalIn returns the value of the expression in b's page.
func evalIn[T any](b *tab, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	require.NoError(b.t, err, expr)
	return v
}

// asked returns the question of the confirmation the last submit
// accepted, or "".
func (b *tab) asked() string {
	b.t.Helper()
	return evalIn[string](b, `sessionStorage.getItem("asked") || ""`)
}
