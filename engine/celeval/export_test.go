package celeval

// Test hooks for the external test package.

// SetEstimateCheck sets the function called after every untracked
// evaluation (nil: none).
func SetEstimateCheck(f func(st *State, p *Program, level int)) { estimateCheck = f }

// Exact evaluates p in st with cost tracking and returns its exact cost.
func Exact(st *State, p *Program) (uint64, bool) {
	prg, err := p.trackedProgram()
	if err != nil {
		return 0, false
	}
	_, det, _ := prg.Eval(st)
	if det == nil || det.ActualCost() == nil {
		return 0, false
	}
	return *det.ActualCost(), true
}

// Estimate returns the static cost estimate of p at a size level.
func Estimate(p *Program, level int) uint64 { return p.est[level] }

// SizeLevel returns the bounds of a size level.
func SizeLevel(level int) (c, s uint64) { return sizeLevels[level].c, sizeLevels[level].s }
