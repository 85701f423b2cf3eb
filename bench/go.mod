module github.com/sluicehq/sluice/bench

go 1.26.0

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/sluicehq/sluice v0.0.0
	golang.org/x/sys v0.49.0
	golang.org/x/time v0.16.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/edsrzf/mmap-go v1.2.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
)

// The benchmarks measure this checkout of Sluice.
replace github.com/sluicehq/sluice => ../
