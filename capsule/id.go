package capsule

// CanonicalID returns the one form in which sagad compares and keys capsule
// ids, and whether s is a capsule id at all (Rule 2): a UUID (8-4-4-4-12
// hex digits) in lower case, a ULID (26 Crockford base32 characters, the
// first at most 7) in upper case. Both are case-insensitive by their specs,
// so "5A6A…" and "5a6a…" are one capsule. For anything else it returns s
// and false.
func CanonicalID(s string) (string, bool) {
	switch len(s) {
	case 36:
		return canonicalUUID(s)
	case 26:
		return canonicalULID(s)
	}
	return s, false
}

func canonicalUUID(s string) (string, bool) {
	upper := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return s, false
			}
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
		case 'A' <= c && c <= 'F':
			upper = true
		default:
			return s, false
		}
	}
	if !upper {
		return s, true // the common case allocates nothing
	}
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'F' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b), true
}

func canonicalULID(s string) (string, bool) {
	if s[0] < '0' || s[0] > '7' {
		return s, false
	}
	lower := false
	for i := 1; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' {
			lower = true
			c -= 'a' - 'A'
		}
		// Crockford's base32 leaves out I, L, O and U.
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' && c != 'I' && c != 'L' && c != 'O' && c != 'U') {
			return s, false
		}
	}
	if !lower {
		return s, true
	}
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return string(b), true
}

// Canonicalize puts capsule_id and every depends_on entry that is a
// capsule id in canonical form ([CanonicalID]); entries that are no capsule
// id stay as written for Rule 2 and Rule 24 to name. Every place that
// decodes capsule bytes calls it right after json.Unmarshal (RECEPTION, the
// pipeline's decoder, the rules' fallback), so RECEPTION's key, the rules,
// and the idempotency keys and artifact refs of later phases all see one
// id. The capsule's bytes, and so its digest, are not changed: sagad keeps
// and forwards them as published.
//
// It is a method rather than an UnmarshalJSON because encoding/json would
// then scan every capsule twice more (twice the decode time, measured).
func (c *Capsule) Canonicalize() {
	c.CapsuleID, _ = CanonicalID(c.CapsuleID)
	for i, d := range c.DependsOn {
		c.DependsOn[i], _ = CanonicalID(d)
	}
}
