//go:build race

package proxy

// raceDetector: the tests run under -race, about ten times slower.
const raceDetector = true
