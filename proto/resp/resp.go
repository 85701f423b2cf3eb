package resp

import (
	"bytes"
	"errors"
	"strconv"
)

// Limits of a parsed command.
const (
	MaxArgs      = 64       // arguments in one command, the name included
	MaxBulkLen   = 16 << 10 // bytes in one argument (keys are at most 1024)
	MaxInlineLen = 16 << 10 // bytes in one inline command line
)

// Errors returned by Parse. Their text is what a Redis server would answer,
// so a server may reply with it as is (AppendError adds the "-").
var (
	ErrArrayLen    = errors.New("ERR Protocol error: invalid multibulk length")
	ErrBulkLen     = errors.New("ERR Protocol error: invalid bulk length")
	ErrBulkTooLong = errors.New("ERR Protocol error: bulk length above 16384 bytes")
	ErrTooManyArgs = errors.New("ERR Protocol error: more than 64 arguments")
	ErrExpected    = errors.New("ERR Protocol error: expected '$'")
	ErrCRLF        = errors.New("ERR Protocol error: expected CRLF after bulk string")
	ErrInline      = errors.New("ERR Protocol error: too big inline request")
	ErrQuotes      = errors.New("ERR Protocol error: unbalanced quotes in request")
)

// Parse parses the first command in buf. It appends the command's arguments
// (the name first) to args[:0] and returns them with the number of bytes the
// command took. n == 0 with a nil error means buf does not yet hold a whole
// command. An empty inline line is a command with no arguments (n > 0,
// len(args) == 0), which callers skip.
//
// The arguments alias buf: they are valid until buf is modified.
func Parse(buf []byte, args [][]byte) (out [][]byte, n int, err error) {
	args = args[:0]
	if len(buf) == 0 {
		return args, 0, nil
	}
	if buf[0] != '*' {
		return parseInline(buf, args)
	}
	count, p, err := parseLen(buf, 1, ErrArrayLen)
	if p == 0 || err != nil {
		return args, 0, err
	}
	switch {
	case count < 0:
		return args, p, nil // a null array: nothing to run
	case count > MaxArgs:
		return args, 0, ErrTooManyArgs
	}
	for range count {
		if p >= len(buf) {
			return args[:0], 0, nil
		}
		if buf[p] != '$' {
			return args[:0], 0, ErrExpected
		}
		size, q, err := parseLen(buf, p+1, ErrBulkLen)
		if q == 0 || err != nil {
			return args[:0], 0, err
		}
		switch {
		case size < 0:
			return args[:0], 0, ErrBulkLen
		case size > MaxBulkLen:
			return args[:0], 0, ErrBulkTooLong
		}
		end := q + int(size)
		if end+2 > len(buf) {
			return args[:0], 0, nil
		}
		if buf[end] != '\r' || buf[end+1] != '\n' {
			return args[:0], 0, ErrCRLF
		}
		args = append(args, buf[q:end:end])
		p = end + 2
	}
	return args, p, nil
}

// parseLen parses the decimal number that starts at buf[i] and ends with
// \r\n. It returns the number and the index after the \r\n, or index 0 if
// the line is not complete. A line too long to hold a length, or anything
// but an optional '-' and digits, is bad.
func parseLen(buf []byte, i int, bad error) (int64, int, error) {
	end := bytes.IndexByte(buf[i:], '\n')
	if end < 0 {
		if len(buf)-i > 20 {
			return 0, 0, bad
		}
		return 0, 0, nil
	}
	end += i
	if end == i || buf[end-1] != '\r' {
		return 0, 0, bad
	}
	v, err := strconv.ParseInt(string(buf[i:end-1]), 10, 64)
	if err != nil || v > 1<<31 {
		return 0, 0, bad
	}
	return v, end + 1, nil
}

// parseInline splits one line into space-separated words. Double quotes
// group words (with \" and \\ escapes), as redis-cli's users expect.
func parseInline(buf []byte, args [][]byte) ([][]byte, int, error) {
	end := bytes.IndexByte(buf, '\n')
	if end < 0 {
		if len(buf) > MaxInlineLen {
			return args, 0, ErrInline
		}
		return args, 0, nil
	}
	if end > MaxInlineLen {
		return args, 0, ErrInline
	}
	line := buf[:end]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	for i := 0; i < len(line); {
		switch c := line[i]; {
		case c == ' ' || c == '\t':
			i++
		case c == '"':
			// Unescape in place: the quoted word only shrinks.
			w, j := i, i+1
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
				}
				line[w] = line[j]
				w++
			}
			if j == len(line) || (j+1 < len(line) && line[j+1] != ' ' && line[j+1] != '\t') {
				return args[:0], 0, ErrQuotes
			}
			if len(args) == MaxArgs {
				return args[:0], 0, ErrTooManyArgs
			}
			args = append(args, line[i:w:w])
			i = j + 1
		default:
			j := i
			for j < len(line) && line[j] != ' ' && line[j] != '\t' {
				j++
			}
			if len(args) == MaxArgs {
				return args[:0], 0, ErrTooManyArgs
			}
			args = append(args, line[i:j:j])
			i = j
		}
	}
	return args, end + 1, nil
}

// AppendSimple appends a simple string reply (+s). s must not contain \r or \n.
func AppendSimple(dst []byte, s string) []byte {
	return append(append(append(dst, '+'), s...), '\r', '\n')
}

// AppendError appends an error reply (-msg). Any \r or \n in msg is replaced
// by a space, so a message can never break the framing.
func AppendError(dst []byte, msg string) []byte {
	dst = append(dst, '-')
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return append(dst, '\r', '\n')
}

// AppendInt appends an integer reply (:v).
func AppendInt(dst []byte, v int64) []byte {
	return append(strconv.AppendInt(append(dst, ':'), v, 10), '\r', '\n')
}

// AppendBulk appends a bulk string reply.
func AppendBulk(dst []byte, b []byte) []byte {
	dst = append(strconv.AppendInt(append(dst, '$'), int64(len(b)), 10), '\r', '\n')
	return append(append(dst, b...), '\r', '\n')
}

// AppendBulkString appends a bulk string reply of s.
func AppendBulkString(dst []byte, s string) []byte {
	dst = append(strconv.AppendInt(append(dst, '$'), int64(len(s)), 10), '\r', '\n')
	return append(append(dst, s...), '\r', '\n')
}

// AppendNull appends a null bulk string ($-1), RESP2's null.
func AppendNull(dst []byte) []byte { return append(dst, "$-1\r\n"...) }

// AppendNull3 appends RESP3's null (_).
func AppendNull3(dst []byte) []byte { return append(dst, "_\r\n"...) }

// AppendArray appends the header of an array of n elements; the caller
// appends the elements.
func AppendArray(dst []byte, n int) []byte {
	return append(strconv.AppendInt(append(dst, '*'), int64(n), 10), '\r', '\n')
}

// AppendMap appends the header of a RESP3 map of n key-value pairs; the
// caller appends 2n elements, each key followed by its value.
func AppendMap(dst []byte, n int) []byte {
	return append(strconv.AppendInt(append(dst, '%'), int64(n), 10), '\r', '\n')
}

// AppendSet appends the header of a RESP3 set of n elements; the caller
// appends the elements.
func AppendSet(dst []byte, n int) []byte {
	return append(strconv.AppendInt(append(dst, '~'), int64(n), 10), '\r', '\n')
}

// AppendVerbatim appends a RESP3 verbatim string of s in format, a
// three-letter type such as "txt" (=<len>\r\ntxt:s\r\n, len counting the
// format and its colon).
func AppendVerbatim(dst []byte, format, s string) []byte {
	dst = append(strconv.AppendInt(append(dst, '='), int64(len(format)+1+len(s)), 10), '\r', '\n')
	dst = append(append(append(dst, format...), ':'), s...)
	return append(dst, '\r', '\n')
}
