module github.com/sluicehq/sluice/clients/go/ululestore

go 1.26.0

require (
	github.com/sluicehq/sluice v0.0.0
	github.com/ulule/limiter/v3 v3.11.2
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/stretchr/testify v1.8.3 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

// The store uses this checkout of the Sluice Go client.
replace github.com/sluicehq/sluice => ../../..
