package sluice

import "github.com/sluicehq/sluice/proto"

// Wire returns what o sets in a request: its flags and, with proto.FlagAt,
// the request's time (Unix ns). Callers that decide without the socket,
// such as package direct, read options through it.
func (o RequestOption) Wire() (proto.Flags, int64) { return o.flags, o.at }
