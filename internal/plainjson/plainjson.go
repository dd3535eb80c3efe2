package plainjson

import "time"

// Plain reports whether encoding/json writes s between quotes exactly as it
// is, for ASCII: no control character, quote, backslash or character it
// escapes for HTML (<, >, &). Any byte past ASCII is refused (UTF-8 that
// json.Marshal would write as it is too, but a check of it is not worth
// having for ids and names that are ASCII).
func Plain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x80, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// AppendTime appends t as time.Time.MarshalJSON writes it, quotes included.
// ok is false, and b unchanged, where MarshalJSON fails: a year outside
// 0–9999 or a zone offset of 24 hours or more.
func AppendTime(b []byte, t time.Time) (_ []byte, ok bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := t.Zone(); off <= -24*60*60 || off >= 24*60*60 {
		return b, false
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), true
}
