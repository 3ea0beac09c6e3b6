package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// This file runs the scenarios through a forwarder with a delay each way
// (--delay), as if the server were on another host: one pass over the
// scenarios per delay, every connection of the pass through the
// forwarder (the bench's pools, the clients', the child processes').
// Only the bench's own connections that do no work in a scenario go
// straight to the server: the one that holds the bench lock, and the
// transaction counter's.

// pings is how many SELECT 1 the bench times, straight to the server and
// through each forwarder, after pingWarmup that it does not time.
const (
	pings      = 200
	pingWarmup = 10
)

// proxyPass is, in the report, one pass through a forwarder.
type proxyPass struct {
	Delay   string  `json:"delay"`
	DelayMS float64 `json:"delay_ms"`
	// PingDirectMS and PingProxyMS are the medians of pings SELECT 1,
	// each a round trip on one connection, straight to the server and
	// through the forwarder: what the delay added, as the Go timers made
	// it, is their difference.
	PingDirectMS float64 `json:"ping_direct_ms"`
	PingProxyMS  float64 `json:"ping_proxy_ms"`
	Pings        int     `json:"pings"`
	// PingRoundTrips is the round trips the forwarder counted for the
	// timed pings: one each.
	PingRoundTrips int64 `json:"ping_round_trips"`
}

// parseDelays parses --delay: comma-separated durations, none negative.
func parseDelays(s string) ([]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var ds []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--delay: %w", err)
		}
		if d < 0 {
			return nil, fmt.Errorf("--delay: %s is negative", d)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// runDelayed runs the selected scenarios through a forwarder with delay
// d each way, which it starts and stops, and adds the rows and the pass
// to rep. The rows are compared with this pass's ceilings and rows only.
func (b *bench) runDelayed(ctx context.Context, rep *report, selected []scenario, d time.Duration) (err error) {
	direct := b.dsn
	target, err := b.sql.serverAddr(direct)
	if err != nil {
		return fmt.Errorf("--delay: %w", err)
	}
	p, err := startProxy(ctx, target, d)
	if err != nil {
		return err
	}
	defer func() {
		if s, err := p.stats(); err == nil {
			fmt.Fprintf(b.progress, "delay %s: the forwarder served %d connections, %d round trips\n", p.delay, s.Conns, s.RoundTrips)
		}
		if err := p.stop(); err != nil {
			b.warn("%v", err)
		}
	}()
	proxied, err := b.sql.withAddr(direct, p.addr)
	if err != nil {
		return fmt.Errorf("--delay: %w", err)
	}
	pass, err := b.pingPass(ctx, direct, proxied, p)
	if err != nil {
		return err
	}
	rep.Proxy = append(rep.Proxy, pass)
	fmt.Fprintf(b.progress, "delay %s each way, through a forwarder at %s: %s\n", pass.Delay, p.addr, pass.pingNote())

	b.dsn, b.proxy, b.delay = proxied, p, pass.Delay
	b.ceiling, b.results = map[int]float64{}, map[string]result{}
	defer func() { b.dsn, b.proxy, b.delay = direct, nil, "" }()
	return b.runScenarios(ctx, rep, selected)
}

// pingNote describes the pass's pings.
func (p proxyPass) pingNote() string {
	return fmt.Sprintf("SELECT 1 median %.3f ms through it, %.3f ms straight to the server (%d pings each, %d round trips counted through it)",
		p.PingProxyMS, p.PingDirectMS, p.Pings, p.PingRoundTrips)
}

// pingPass times pings straight to the server (direct) and through the
// forwarder p (proxied), and counts the round trips p saw for them.
func (b *bench) pingPass(ctx context.Context, direct, proxied string, p *proxyProc) (proxyPass, error) {
	pass := proxyPass{Delay: p.delay.String(), DelayMS: float64(p.delay) / float64(time.Millisecond), Pings: pings}
	var err error
	if pass.PingDirectMS, err = b.pingMedian(ctx, direct, nil); err != nil {
		return pass, err
	}
	var start, end proxyStats
	pass.PingProxyMS, err = b.pingMedian(ctx, proxied, func(before bool) error {
		s, err := p.stats()
		if before {
			start = s
		} else {
			end = s
		}
		return err
	})
	pass.PingRoundTrips = end.RoundTrips - start.RoundTrips
	return pass, err
}

// pingMedian returns the median time, in milliseconds, of pings SELECT 1
// on one connection to dsn, after pingWarmup untimed ones. around, if
// set, is called before the timed pings (true) and after (false).
func (b *bench) pingMedian(ctx context.Context, dsn string, around func(before bool) error) (float64, error) {
	db, err := b.openDSN(ctx, dsn, 1)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("ping: open a connection: %w", err)
	}
	defer conn.Close()
	times := make([]time.Duration, 0, pings)
	for i := range pingWarmup + pings {
		if i == pingWarmup && around != nil {
			if err := around(true); err != nil {
				return 0, err
			}
		}
		began := time.Now()
		var one int
		if err := conn.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			return 0, fmt.Errorf("ping: SELECT 1: %w", err)
		}
		if i >= pingWarmup {
			times = append(times, time.Since(began))
		}
	}
	if around != nil {
		if err := around(false); err != nil {
			return 0, err
		}
	}
	return *percentile(times, 0.5), nil
}
