package sluice

import "testing"

// A caller takes the roles that are free rather than wake the goroutines
// that would take them: both when nothing else is going on, the writing
// role while someone else reads; none while someone writes (the writer
// takes its call along). Without take (the RELEASE of an orphaned lease,
// queued from the reading role) the writer goroutine is woken.
func TestEnqueue_roles(t *testing.T) {
	newConn := func(writing, reading bool) *conn {
		cn := &conn{wake: make(chan struct{}, 1), readWake: make(chan struct{}, 1)}
		cn.writing, cn.reading = writing, reading
		if reading {
			cn.inflight.push(&call{}) // the reader's call
		}
		return cn
	}
	for _, tc := range []struct {
		name             string
		writing, reading bool
		take             bool
		want             role
		woken            bool // the writer goroutine
	}{
		{name: "idle", take: true, want: roleDirect},
		{name: "someone reads", reading: true, take: true, want: roleWrite},
		{name: "someone writes", writing: true, take: true, want: roleNone},
		{name: "someone writes and reads", writing: true, reading: true, take: true, want: roleNone},
		{name: "someone reads, not taking", reading: true, want: roleNone, woken: true},
		{name: "idle, not taking", want: roleNone, woken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cn := newConn(tc.writing, tc.reading)
			got, err := cn.enqueue(tc.take, &call{})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("role %d, want %d", got, tc.want)
			}
			if !cn.writing {
				t.Error("nobody holds the writing role with a call queued")
			}
			if got == roleDirect && !cn.reading {
				t.Error("a direct round trip without the reading role")
			}
			if woken := len(cn.wake) == 1; woken != tc.woken {
				t.Errorf("writer goroutine woken: %v, want %v", woken, tc.woken)
			}
			if len(cn.readWake) != 0 {
				t.Error("the reader goroutine was woken")
			}
		})
	}
}
