package engine

import (
	"errors"
	"testing"
	"time"

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
		{"quota:limit=100,period=day",
			bucket.Limit{Algorithm: bucket.Quota, Max: 100, Calendar: bucket.CalDay, Every: 1}},
		{"quota:limit=100,period=3month,tz=Europe/Paris,anchor=31",
			bucket.Limit{Algorithm: bucket.Quota, Max: 100, Calendar: bucket.CalMonth, Every: 3, Anchor: 31, Loc: mustZone(t, "Europe/Paris")}},
		{"quota:limit=1,period=2week,tz=UTC,week_start=sunday",
			bucket.Limit{Algorithm: bucket.Quota, Max: 1, Calendar: bucket.CalWeek, Every: 2, WeekStart: 6}},
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
		{Algorithm: proto.Quota, P: [3]int64{1, proto.QuotaDay | 1<<8, 0}, TZ: "Mars/Olympus_Mons"},
		{Algorithm: proto.Quota, P: [3]int64{1, proto.QuotaDay | 1<<8, 0}, TZ: "Local"},
		{Algorithm: proto.Quota, P: [3]int64{1, 5 | 1<<8, 0}},
		{Algorithm: proto.Quota, P: [3]int64{1, proto.QuotaDay | 1<<8, 1 << 16}},
		{Algorithm: proto.Quota, P: [3]int64{1, proto.QuotaDay | 1<<8, 3}}, // an anchor for days
		{Algorithm: proto.Quota, P: [3]int64{1, proto.QuotaMonth | 1<<8, 32}},
		{Algorithm: proto.Quota, P: [3]int64{1, proto.QuotaWeek | 1<<8, 7 << 8}},
		{Algorithm: proto.Quota, P: [3]int64{1, proto.QuotaYear | 1000<<8, 0}},
	} {
		if _, err := FromProto(w); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("FromProto(%v) = %v, want ErrInvalidLimit", w, err)
		}
	}
}

// mustZone loads a zone for a test.
func mustZone(t *testing.T, name string) *time.Location {
	loc, err := LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// A quota's zone is part of its buckets' identity: the same key under two
// zones is two buckets.
func TestQuotaZoneIdentity(t *testing.T) {
	a, err := FromProto(proto.QuotaLimit(1, proto.QuotaDay, 1, "Europe/Paris", 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromProto(proto.QuotaLimit(1, proto.QuotaDay, 1, "Europe/Berlin", 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if a.ident == b.ident {
		t.Error("two zones share an identity")
	}
}
