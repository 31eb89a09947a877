package patch

import (
	"strconv"
	"unicode/utf8"
)

// quoteError is the error encoding/json reports for strconv.Quote(s), the
// JSON text kube-apiserver and Kyverno give evanphx for an operation's op,
// path and from, or "" when it decodes (to s). strconv.Quote escapes what is
// not printable as Go does: \a, \v, \xNN (other control characters, DEL,
// invalid UTF-8) and \UNNNNNNNN (beyond U+FFFF) are no JSON escapes.
func quoteError(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return quoteErrorSlow(s)
		}
	}
	return ""
}

func quoteErrorSlow(s string) string {
	if utf8.ValidString(s) {
		ok := true
		for _, r := range s {
			if r < 0x20 || r == 0x7f {
				if r != '\b' && r != '\f' && r != '\n' && r != '\r' && r != '\t' {
					ok = false
					break
				}
			} else if r >= 0x10000 && !strconv.IsPrint(r) {
				ok = false
				break
			}
		}
		if ok {
			return ""
		}
	}
	q := strconv.Quote(s)
	for i := 1; i < len(q)-1; i++ {
		if q[i] != '\\' {
			continue
		}
		i++
		switch c := q[i]; c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't', 'u':
		default:
			return "invalid character '" + string(c) + "' in string escape code"
		}
	}
	return ""
}
