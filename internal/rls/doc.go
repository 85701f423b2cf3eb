// Package rls matches the requests of Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) to the
// descriptors of the config file, as envoyproxy/ratelimit does, and builds
// the responses. It decides nothing: the server decides the buckets it
// names (a fixed window per rule, or a named limit of the file) with the
// engine, all of a request's descriptors together.
//
// # Matching
//
// A Config is one tree of descriptors per domain, in envoyproxy/ratelimit's
// format. A request descriptor's entries are matched level by level: at
// each level the entry's key and value first, then a wildcard value ('*'
// stands for any run of bytes) in the file's order, then the key alone (any
// value, each value its own bucket unless share_threshold). A rule applies
// only where the descriptor's last entry matches: a request deeper or
// shallower than the rule is not limited, and a matched node without a
// rule (a whitelist) limits nothing. A rule that replaces another's name
// drops that rule from the request. A descriptor's own limit (the request
// field limit) replaces the file's, in a domain the file has.
//
// # Buckets
//
// A rule with unit and requests_per_unit is a fixed window aligned to the
// Unix epoch, a month 30 days and a year 365 (envoyproxy/ratelimit's
// lengths); 0 per unit denies every hit without a bucket; unlimited is
// answered OK with the largest remaining count. A bucket's key is the
// domain and the entries, each length-prefixed.
//
// Item, Match, Result and Respond are the steps of one request: Match
// checks the request (its bounds: MaxDescriptors, MaxEntries, MaxKeyLen)
// and returns one Item per descriptor, the server fills one Result per
// Item it decides, Respond builds the answer.
package rls
