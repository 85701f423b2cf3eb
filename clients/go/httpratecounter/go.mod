module github.com/sluicehq/sluice/clients/go/httpratecounter

go 1.26.0

require (
	github.com/go-chi/httprate v0.16.1
	github.com/sluicehq/sluice v0.0.0
)

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/zeebo/xxh3 v1.0.2 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

// The counter uses this checkout of the Sluice Go client.
replace github.com/sluicehq/sluice => ../../..
