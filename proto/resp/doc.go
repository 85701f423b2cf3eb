// Package resp is the Redis serialization protocol (RESP2 and RESP3) as Sluice's
// Redis-compatible listener speaks it: a parser for client commands and
// append-style writers for replies. It does no I/O and allocates nothing:
// parsed arguments alias the caller's buffer.
//
// # Format
//
// A command is an array of bulk strings:
//
//	*<n>\r\n  then n times  $<len>\r\n<len bytes>\r\n
//
// or an inline command: one line of words separated by spaces, ended by
// \n or \r\n (what a person types into telnet or nc). Replies are
// simple strings (+OK\r\n), errors (-message\r\n), integers (:42\r\n),
// bulk strings ($3\r\nfoo\r\n, or $-1\r\n for none) and arrays (*2\r\n...).
// A connection that switched to RESP3 (HELLO 3) may also be sent RESP3's
// null (_\r\n), maps (%<pairs>\r\n then key, value, ...), sets
// (~<n>\r\n...) and verbatim strings (=<len>\r\ntxt:<text>\r\n); which
// reply uses which type is the server's business. Commands are the same in
// both versions.
//
// # Limits
//
// Declared lengths are checked against MaxArgs and MaxBulkLen before
// anything waits for the bytes they announce, and Parse never allocates in
// proportion to a declared length: a client announcing a 2 GiB bulk string
// gets ErrBulkTooLong at once. An inline command longer than MaxInlineLen is
// refused.
//
// # Caveats
//
// Of RESP3 only the reply types above are written: no push messages,
// attributes, doubles, big numbers or streamed strings, which no command of
// Sluice answers with.
package resp
