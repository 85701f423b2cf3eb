package sluice

import "github.com/sluicehq/sluice/clients/go/sluice/internal/clientwire"

// What packages that decide without the socket, such as package direct,
// read and write in the client's terms, kept out of the exported API.
func init() {
	clientwire.Options = requestFlags
	clientwire.Decision = decisionOf
}
