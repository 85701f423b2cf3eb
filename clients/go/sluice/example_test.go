package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
)

// The examples talk to a sidecar that TestMain runs at exampleSocket, its
// clock stopped at 2023-11-14T22:13:20Z. In a program the socket would be
// sluiced's, e.g. "var/sluice.sock". Their clients wait a second for an
// answer, not the default 50 ms, which a busy test machine can miss.

func ExampleClient_Acquire() {
	c, err := sluice.Dial(exampleSocket, sluice.WithTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	login := sluice.TokenBucket(3, time.Hour, 1) // 3 attempts, then 1 more an hour
	for range 4 {
		d, err := c.Acquire(context.Background(), login, "login:alice", 1)
		if err != nil {
			log.Fatal(err)
		}
		if d.Allowed {
			fmt.Println("allowed, remaining", d.Remaining)
		} else {
			fmt.Println("denied, retry after", d.RetryAfter)
		}
	}
	// Output:
	// allowed, remaining 2
	// allowed, remaining 1
	// allowed, remaining 0
	// denied, retry after 1h0m0s
}

func ExampleParseLimit() {
	l, err := sluice.ParseLimit("gcra:burst=4,count=10,period=1m")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.Algorithm, l == sluice.GCRA(4, 10, time.Minute))
	l, _ = sluice.ParseLimit("token_bucket:max=10,refill_time=1h") // refill_amount defaults to max
	fmt.Println(l)
	_, err = sluice.ParseLimit("token_bucket:max=ten,refill_time=1h")
	fmt.Println(errors.Is(err, sluice.ErrInvalidLimit))
	// Output:
	// gcra true
	// token_bucket:max=10,refill_time=1h0m0s,refill_amount=10
	// true
}

func ExampleClient_Multi() {
	c, err := sluice.Dial(exampleSocket, sluice.WithTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// A signup takes one from its address's budget and one from the
	// site's, or from neither.
	items := []sluice.Item{
		{Limit: sluice.TokenBucket(2, time.Hour, 1), Key: "signup:ip:192.0.2.7", Cost: 1},
		{Limit: sluice.FixedWindow(100, 24*time.Hour), Key: "signup:all", Cost: 1},
	}
	for range 3 {
		allowed, ds, err := c.Multi(context.Background(), items)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed %v: ip %v, site %v\n", allowed, ds[0].Allowed, ds[1].Allowed)
	}
	d, _ := c.Acquire(context.Background(), items[1].Limit, "signup:all", 0) // cost 0 peeks
	fmt.Println("site budget left:", d.Remaining)
	// Output:
	// allowed true: ip true, site true
	// allowed true: ip true, site true
	// allowed false: ip false, site true
	// site budget left: 98
}

func ExampleMiddleware() {
	c, err := sluice.Dial(exampleSocket, sluice.WithTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	byIP := func(r *http.Request) (string, bool) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		return "http:ip:" + host, err == nil
	}
	limit := sluice.FixedWindow(2, time.Minute) // 2 requests a minute per address
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	h := sluice.Middleware(c, limit, byIP, sluice.WithPolicyName("per-ip"))(hello)

	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil)) // from 192.0.2.1
		fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"))
		if rec.Code == http.StatusTooManyRequests {
			fmt.Println("Retry-After:", rec.Header().Get("Retry-After"))
		}
	}
	// Output:
	// 200 "per-ip";q=2;w=60 "per-ip";r=1;t=40
	// 200 "per-ip";q=2;w=60 "per-ip";r=0;t=40
	// 429 "per-ip";q=2;w=60 "per-ip";r=0;t=40
	// Retry-After: 40
}

func ExampleWithFailurePolicy() {
	// Logins: refuse rather than let attempts through unlimited while the
	// sidecar is away. Dial checks that the sidecar answers; from then on
	// its outages (a restart, a crash) are decided by the policy, Degraded.
	c, err := sluice.Dial(exampleSocket, sluice.WithFailurePolicy(sluice.FailClosed))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	d, err := c.Acquire(context.Background(), sluice.GCRA(4, 1, time.Second), "login:bob", 1)
	fmt.Println(d.Allowed, d.Degraded, err)
	// Every decision the policy made is counted: export it.
	fmt.Println(c.Degraded())
	// Output:
	// true false <nil>
	// 0
}

func ExampleDial() {
	// Nothing listens here (a typo, or the application started from
	// another directory than the sidecar): Dial fails, naming the socket's
	// absolute path, rather than return a client that allows everything.
	_, err := sluice.Dial(filepath.Join("testdata", "no-such.sock"))
	fmt.Println(errors.Is(err, sluice.ErrUnavailable))
	fmt.Println(strings.Contains(err.Error(), "nothing listens at /"))
	// Output:
	// true
	// true
}

func ExampleWithLazyStart() {
	// An application that may start before its sidecar: Dial does not ask
	// it, and every call fails until it has answered once (then the failure
	// policy covers its outages).
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := sluice.Dial(filepath.Join("testdata", "no-such.sock"), sluice.WithLazyStart(), sluice.WithLogger(quiet))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	d, err := c.Acquire(context.Background(), sluice.GCRA(4, 1, time.Second), "api:token:42", 1)
	fmt.Println(d.Allowed, d.Degraded, errors.Is(err, sluice.ErrUnavailable))
	// Output:
	// false false true
}

func ExampleClient_Pipeline() {
	c, err := sluice.Dial(exampleSocket, sluice.WithTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Three requests in one write and one wait; each is decided on its own.
	perIP := sluice.TokenBucket(2, time.Hour, 1)
	p := c.Pipeline()
	for range 3 {
		p.Acquire(perIP, "ip:192.0.2.7", 1)
	}
	results, err := p.Exec(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		fmt.Println(r.Decision.Allowed, r.Decision.Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}

// A sliding_window limit is the two-window weighted counter: an estimate,
// not a log of every request. Requests bunched at the end of one window and
// early in the next can pass up to nearly twice the limit within one
// window's length: here 19 within 9.95 s for a limit of 10 per 10 s.
func ExampleSlidingWindow() {
	c, err := sluice.Dial(exampleSocket, sluice.WithTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	l := sluice.SlidingWindow(10, 10*time.Second)
	start := time.Unix(1_700_000_000, 0).Add(9900 * time.Millisecond) // late in a window
	count := func(at time.Time) (allowed int) {
		for range 20 {
			d, err := c.Acquire(context.Background(), l, "sliding", 1, sluice.At(at))
			if err != nil {
				log.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
		}
		return allowed
	}
	first := count(start)
	second := count(start.Add(9950 * time.Millisecond)) // 0.15 s before the next window ends
	fmt.Println(first, "+", second, "=", first+second, "allowed within 9.95s")
	// Output: 10 + 9 = 19 allowed within 9.95s
}

func ExampleClient_Lease() {
	c, err := sluice.Dial(exampleSocket, sluice.WithTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// At most 2 exports at once per tenant, across every process on the
	// host; a lease not released (its holder hung) expires after an hour.
	exports := sluice.Concurrency(2, time.Hour)
	export := func(tenant string) error {
		lease, err := c.Lease(context.Background(), exports, "exports:"+tenant)
		if err != nil {
			return err
		}
		defer lease.Release() // whatever happens below
		if !lease.Allowed {
			return fmt.Errorf("%d exports running already", lease.Limit)
		}
		// ... the export, holding its slot ...
		return nil
	}

	// Two long exports hold both slots.
	a, _ := c.Lease(context.Background(), exports, "exports:acme")
	b, _ := c.Lease(context.Background(), exports, "exports:acme")
	fmt.Println(a.Allowed, b.Allowed, b.Remaining)
	fmt.Println(export("acme"))
	a.Release()
	fmt.Println(export("acme"))
	fmt.Println(export("acme")) // its slot came back
	b.Release()
	// Output:
	// true true 0
	// 2 exports running already
	// <nil>
	// <nil>
}
