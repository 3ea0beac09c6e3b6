// Package browsertest holds the dashboard's test in a real browser,
// headless Chromium driven with chromedp. It is a module of its own so
// that chromedp is not a requirement of the bunqueue module. Run it from
// this directory with "go test ./..."; it skips, saying so, where no
// Chromium is installed (Debian: apt-get install -y chromium).
package browsertest
