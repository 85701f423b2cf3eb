// Command sluice talks to a running sluiced: it acquires, peeks, refunds and
// resets buckets, runs commands holding a concurrency limit's slots (lease,
// release), lists buckets, and shows the sidecar's counters. Run
// "sluice --help" for the commands.
//
// Exit status: 0 when the request was allowed (or a command that decides
// nothing succeeded), 1 when it was denied, 2 on any error, with a
// one-line message on stderr.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}
