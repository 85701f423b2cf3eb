// Package errtext turns an error into the sentence people read: on the
// sidecar's and the CLI's stderr, and in the error replies on the wire.
//
// The library packages prefix their errors with their name ("shm: table
// full", as the house style asks), and each layer that adds context adds its own
// ("shm: open var/sluice.state: shm: state file is in use by another
// process"): that tells a programmer where an error came from, and tells a
// user nothing. String drops the prefixes; the words stay.
package errtext
