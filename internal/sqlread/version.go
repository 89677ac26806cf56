package sqlread

import "strings"

// ParseVersion reads a server's version string (the handshake's, or
// VERSION()):
//
//	"5.5.5-10.11.19-MariaDB-0+deb12u1" -> MariaDB, 101119 (MariaDB 10+ prefixes "5.5.5-")
//	"11.4.2-MariaDB"                   -> MariaDB, 110402
//	"8.0.36"                           -> MySQL, 80036
//	"8.0.11-TiDB-v8.4.0"               -> TiDB, 80400 (TiDB's own version)
//
// An unreadable version gives version 0: versioned comments are then
// uncertain.
func ParseVersion(v string) (Flavor, uint32) {
	switch {
	case strings.Contains(v, "-TiDB-"):
		i := strings.Index(v, "-TiDB-")
		rest := strings.TrimPrefix(v[i+len("-TiDB-"):], "v")
		return TiDB, versionNumber(rest)
	case strings.Contains(strings.ToLower(v), "mariadb"):
		v = strings.TrimPrefix(v, "5.5.5-")
		return MariaDB, versionNumber(v)
	}
	return MySQL, versionNumber(v)
}

// versionNumber reads "X.Y.Z..." as X*10000 + Y*100 + Z.
func versionNumber(s string) uint32 {
	var parts [3]uint32
	k := 0
	digits := false
	for i := 0; i < len(s) && k < 3; i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			parts[k] = parts[k]*10 + uint32(c-'0')
			digits = true
			if parts[k] > 99 && k > 0 || parts[k] > 999 {
				return 0
			}
		case c == '.' && digits:
			k++
			digits = false
		default:
			if k < 2 || !digits {
				return 0
			}
			k = 3
		}
	}
	if k < 2 || k == 2 && !digits {
		return 0
	}
	return parts[0]*10000 + parts[1]*100 + parts[2]
}
