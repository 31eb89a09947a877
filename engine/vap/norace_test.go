//go:build !race

package vap_test

const raceEnabled = false
