package schemas

// fastDateTime is the library's "date-time" format (lib) with the form a
// sealed capsule's times take, "2026-11-29T08:57:53Z", accepted in one pass:
// the library reads a date through time.Parse and then the time by hand,
// which was a fifth of the fast path's time on a valid capsule (three
// times each). Every other string, and any value of that form it does not
// accept, is the library's to judge, so the result is always the
// library's (FuzzDateTime holds the two to the same answer).
func fastDateTime(lib func(any) bool) func(any) bool {
	return func(v any) bool {
		if s, ok := v.(string); ok && utcSecondsValid(s) {
			return true
		}
		return lib(v)
	}
}

// utcSecondsValid reports whether s is YYYY-MM-DDTHH:MM:SSZ naming a day
// that exists and a time within it. A leap second (:60), which the library
// accepts at 23:59 UTC only, is left to it.
func utcSecondsValid(s string) bool {
	if len(s) != 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' || s[19] != 'Z' {
		return false
	}
	year, ok1 := twoDigits(s, 0)
	yearLow, ok2 := twoDigits(s, 2)
	month, ok3 := twoDigits(s, 5)
	day, ok4 := twoDigits(s, 8)
	hour, ok5 := twoDigits(s, 11)
	minute, ok6 := twoDigits(s, 14)
	second, ok7 := twoDigits(s, 17)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
		return false
	}
	year = year*100 + yearLow
	return month >= 1 && month <= 12 && day >= 1 && day <= daysIn(month, year) &&
		hour <= 23 && minute <= 59 && second <= 59
}

// twoDigits reads the two decimal digits at s[i:i+2].
func twoDigits(s string, i int) (int, bool) {
	hi, lo := s[i]-'0', s[i+1]-'0'
	return int(hi)*10 + int(lo), hi <= 9 && lo <= 9
}

// daysIn is the number of days of month in year (proleptic Gregorian, as
// the time package counts them).
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
