module github.com/sluicehq/sluice/clients/go/throttledlimiter

go 1.26.0

require (
	github.com/sluicehq/sluice v0.0.0
	github.com/throttled/throttled/v2 v2.15.0
)

require github.com/hashicorp/golang-lru v0.5.4 // indirect

// The rate limiter uses this checkout of the Sluice Go client.
replace github.com/sluicehq/sluice => ../../..
