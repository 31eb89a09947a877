package mpol

// SetCopyOnly makes every policy apply its mutations by copying, not in
// place (the reference the in-place path is checked against).
func SetCopyOnly(on bool) { copyOnly = on }
