package httpratecounter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	"github.com/sluicehq/sluice/clients/go/httpratecounter"
	"github.com/sluicehq/sluice/clients/go/internal/sluicedtest"
	"github.com/sluicehq/sluice/clients/go/sluice"
)

func TestMain(m *testing.M) { sluicedtest.Main(m, worker) }

// reply is what a request through a rate limiter got.
type reply struct {
	code                         int
	limit, remaining, retryAfter string
}

// send sends one request through h with per-request increment inc (0:
// none) and returns its reply.
func send(h http.Handler, inc int) reply {
	r := httptest.NewRequest("GET", "/", nil)
	if inc != 0 {
		r = r.WithContext(httprate.WithIncrement(r.Context(), inc))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	hd := rec.Header()
	return reply{rec.Code, hd.Get("X-RateLimit-Limit"), hd.Get("X-RateLimit-Remaining"), hd.Get("Retry-After")}
}

var ok = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// limited returns a handler limited to limit requests per window by a
// rate limiter with the given options, all requests under one key, and
// whose error handler answers 503.
func limited(limit int, window time.Duration, opts ...httprate.Option) http.Handler {
	opts = append([]httprate.Option{httprate.WithKeyFuncs(httprate.Key("k")),
		httprate.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		})}, opts...)
	return httprate.NewRateLimiter(limit, window, opts...).Handler(ok)
}

// One process, one request at a time: the counter answers every request
// as httprate's own counter does, status and headers.
func TestCounter_likeHttprate(t *testing.T) {
	c := sluicedtest.Start(t).Dial(t)
	window := sluicedtest.QuietWindow()
	local := limited(5, window)
	sluiced := limited(5, window, httprate.WithLimitCounter(httpratecounter.New(c)))
	for i := range 8 {
		want, got := send(local, 0), send(sluiced, 0)
		if got != want {
			t.Fatalf("request %d: %+v, httprate's own counter %+v", i, got, want)
		}
		if wantCode := map[bool]int{true: 200, false: 429}[i < 5]; got.code != wantCode {
			t.Fatalf("request %d: %d, want %d", i, got.code, wantCode)
		}
	}
}

// peek returns what is left of key's bucket under the counter's limit.
func peek(t *testing.T, c *sluice.Client, limit int, window time.Duration, key string) int64 {
	t.Helper()
	d, err := c.Peek(context.Background(), sluice.SlidingWindow(int64(limit), window), httpratecounter.DefaultPrefix+key)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// Per-request increments and limits, which the counter cannot see, never
// admit more than the counter's limit.
func TestCounter_perRequestValues(t *testing.T) {
	c := sluicedtest.Start(t).Dial(t)
	window := sluicedtest.QuietWindow()
	t.Run("increment", func(t *testing.T) {
		h := limited(5, window, httprate.WithLimitCounter(httpratecounter.New(c)))
		for i, want := range []reply{
			{200, "5", "3", ""}, {200, "5", "1", ""},
			{429, "5", "1", strconv.Itoa(int(window.Seconds()))}, // refused by httprate: its token stays taken
		} {
			if got := send(h, 2); got != want {
				t.Fatalf("request %d: %+v, want %+v", i, got, want)
			}
		}
		if left := peek(t, c, 5, window, "k:"); left != 0 { // JoinKeys ends a key with ":"
			t.Errorf("%d left, want 0", left)
		}
	})
	t.Run("increment meets another process", func(t *testing.T) {
		k := httpratecounter.New(c, httpratecounter.WithPrefix("race:"))
		k.Config(5, window)
		now := time.Now()
		if curr, prev, err := k.Get("k", now, now); err != nil || curr != 0 || prev != 0 {
			t.Fatalf("Get: %d %d %v, want 0 0", curr, prev, err)
		}
		// Another process takes the rest before the increment of 2.
		if d, err := c.Acquire(context.Background(), sluice.SlidingWindow(5, window), "race:k", 4); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		if err := k.IncrementBy("k", now, 2); !errors.Is(err, httpratecounter.ErrLimited) {
			t.Fatalf("IncrementBy: %v, want ErrLimited", err)
		}
		d, err := c.Peek(context.Background(), sluice.SlidingWindow(5, window), "race:k")
		if err != nil || d.Remaining != 1 {
			t.Errorf("%d left, %v; want 1: the refused request's token given back", d.Remaining, err)
		}
	})
	t.Run("request limit above the counter's", func(t *testing.T) {
		h := limited(2, window, httprate.WithLimitCounter(httpratecounter.New(c, httpratecounter.WithPrefix("above:"))))
		codes := []int{}
		for range 4 {
			r := httptest.NewRequest("GET", "/", nil)
			r = r.WithContext(httprate.WithRequestLimit(r.Context(), 10))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			codes = append(codes, rec.Code)
		}
		if want := []int{200, 200, 503, 503}; !equal(codes, want) {
			t.Errorf("statuses %v, want %v (the error handler's 503 past the counter's limit)", codes, want)
		}
	})
	t.Run("increment without a Get", func(t *testing.T) {
		k := httpratecounter.New(c, httpratecounter.WithPrefix("direct:"))
		k.Config(2, window)
		now := time.Now()
		for i, want := range []error{nil, nil, httpratecounter.ErrLimited} {
			if err := k.Increment("k", now); !errors.Is(err, want) {
				t.Fatalf("increment %d: %v, want %v", i, err, want)
			}
		}
	})
	t.Run("no limit", func(t *testing.T) {
		k := httpratecounter.New(c)
		if _, _, err := k.Get("k", time.Now(), time.Now()); err == nil {
			t.Error("Get without Config succeeded")
		}
	})
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// When the sidecar cannot be reached, the client's failure policy decides.
func TestCounter_failurePolicy(t *testing.T) {
	sc := sluicedtest.Start(t)
	handler := func(p sluice.FailurePolicy) http.Handler {
		return limited(5, time.Minute, httprate.WithLimitCounter(httpratecounter.New(sc.Dial(t, sluice.WithFailurePolicy(p)))))
	}
	open, closed, failing := handler(sluice.FailOpen), handler(sluice.FailClosed), handler(sluice.FailError)
	sc.Stop(t)
	if got := send(open, 0); got.code != 200 || got.remaining != "4" {
		t.Errorf("FailOpen: %+v, want 200 with 4 remaining", got)
	}
	if got := send(closed, 0); got.code != 429 || got.remaining != "0" {
		t.Errorf("FailClosed: %+v, want 429 with 0 remaining", got)
	}
	if got := send(failing, 0); got.code != 503 {
		t.Errorf("FailError: %+v, want the error handler's 503", got)
	}
}

// Several processes through httprate on one key admit exactly the limit
// between them.
func TestCounter_processes(t *testing.T) {
	sluicedtest.ExactAcrossProcesses(t, sluicedtest.Start(t).Socket)
}

// worker is one process of TestCounter_processes.
func worker(ctx context.Context, c *sluice.Client, window time.Duration) (int, error) {
	return sluicedtest.Requests(httprate.NewRateLimiter(sluicedtest.ProcLimit, window,
		httprate.WithKeyFuncs(httprate.Key("k")), httprate.WithLimitCounter(httpratecounter.New(c))).Handler)
}
