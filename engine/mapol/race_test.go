//go:build race

package mapol_test

// raceEnabled: the race detector slows CEL evaluation ~10x.
const raceEnabled = true
