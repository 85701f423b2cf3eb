module github.com/sluicehq/sluice/clients/go/golimiterstore

go 1.26.0

require (
	github.com/sethvargo/go-limiter v1.1.0
	github.com/sluicehq/sluice v0.0.0
)

// The store uses this checkout of the Sluice Go client.
replace github.com/sluicehq/sluice => ../../..
