package engine

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/proto"
)

// FromProto maps each parameter of a spec, by its name on the wire, onto
// the bucket.Limit field of the same meaning.
func TestFromProto(t *testing.T) {
	for _, c := range []struct {
		spec string
		want bucket.Limit
	}{
		{"token_bucket:max=10,refill_time=1h,refill_amount=2",
			bucket.Limit{Algorithm: bucket.TokenBucket, Max: 10, RefillTime: 3600e9, RefillAmount: 2}},
		{"gcra:burst=4,count=3,period=1m",
			bucket.Limit{Algorithm: bucket.GCRA, Burst: 4, Count: 3, Period: 60e9}},
		{"fixed_window:limit=5,window=10s",
			bucket.Limit{Algorithm: bucket.FixedWindow, Max: 5, Window: 10e9}},
		{"sliding_window:limit=7,window=1m",
			bucket.Limit{Algorithm: bucket.SlidingWindow, Max: 7, Window: 60e9}},
		{"pacer:rate=2,period=1s,max_delay=500ms",
			bucket.Limit{Algorithm: bucket.Pacer, Count: 2, Period: 1e9, MaxDelay: 500e6}},
	} {
		w, err := proto.ParseLimit(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		l, err := FromProto(w)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if want := MustLimit(c.want); *l.Bucket() != *want.Bucket() || l.ident != want.ident {
			t.Errorf("%s: got %+v, want %+v", c.spec, *l.Bucket(), c.want)
		}
	}
	for _, w := range []proto.Limit{
		{},
		{Algorithm: proto.FixedWindow, P: [3]int64{5, 1e9, 1}},
		{Algorithm: proto.TokenBucket, P: [3]int64{0, 1e9, 1}},
		{Algorithm: 200, P: [3]int64{1, 1, 1}},
	} {
		if _, err := FromProto(w); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("FromProto(%v) = %v, want ErrInvalidLimit", w, err)
		}
	}
}
