//go:build race

package rewrite

// The race detector makes sync.Pool drop items at random: allocation
// counts mean nothing then.
func init() { raceDetector = true }
