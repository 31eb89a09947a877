//go:build !race

package mapol_test

const raceEnabled = false
