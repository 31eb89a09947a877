package admission

// Index lists items (policies, in evaluation order) by the resources
// their rules may match, so a request visits only the candidates for its
// resource; items whose rules match any resource ("*", or no rule) are
// candidates for every resource. It is immutable once built.
type Index[T comparable] struct {
	all        []T
	names      [][]string
	wild       []bool
	byResource map[string][]T
	wildcard   []T
}

// Add appends an item (in evaluation order) with the resource names its
// rules name; wildcard says it may match any resource.
func (ix *Index[T]) Add(item T, names []string, wildcard bool) {
	ix.all = append(ix.all, item)
	ix.names = append(ix.names, names)
	ix.wild = append(ix.wild, wildcard)
}

// Build indexes the items added.
func (ix *Index[T]) Build() {
	ix.byResource = map[string][]T{}
	for i, item := range ix.all {
		if ix.wild[i] {
			ix.wildcard = append(ix.wildcard, item)
			continue
		}
		seen := map[string]bool{}
		for _, n := range ix.names[i] {
			if !seen[n] {
				seen[n] = true
				ix.byResource[n] = append(ix.byResource[n], item)
			}
		}
	}
	ix.names, ix.wild = nil, nil
	if len(ix.wildcard) == 0 {
		return
	}
	// Every per-resource list also holds the wildcard items, in the
	// global order.
	wild := map[T]bool{}
	for _, item := range ix.wildcard {
		wild[item] = true
	}
	for n, l := range ix.byResource {
		in := map[T]bool{}
		for _, item := range l {
			in[item] = true
		}
		merged := make([]T, 0, len(l)+len(ix.wildcard))
		for _, item := range ix.all {
			if in[item] || wild[item] {
				merged = append(merged, item)
			}
		}
		ix.byResource[n] = merged
	}
}

// Candidates returns, in evaluation order, the items that may match a
// request on resource.
func (ix *Index[T]) Candidates(resource string) []T {
	if l, ok := ix.byResource[resource]; ok {
		return l
	}
	return ix.wildcard
}

// All returns every item, in evaluation order.
func (ix *Index[T]) All() []T { return ix.all }
