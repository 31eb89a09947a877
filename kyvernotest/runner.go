package kyvernotest

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// Filter selects expectations, as `kyverno test --test-case-selector`:
// "policy=NAME,rule=NAME,resource=NAME" with * and ? wildcards.
type Filter struct {
	policies, rules, resources []string
	// override replaces the resources of every kept expectation (the
	// CLI's resource filters other than "*").
	override []string
}

// ParseFilter parses a test case selector. An empty selector keeps all.
func ParseFilter(in string) (*Filter, error) {
	f := &Filter{}
	if strings.TrimSpace(in) == "" {
		return f, nil
	}
	var errs []string
	stop := false
	for _, t := range strings.Split(in, ",") {
		parts := strings.Split(t, "=")
		if len(parts) != 2 {
			errs = append(errs, fmt.Sprintf("invalid test-case-selector argument (%s): must be in the form <key>=<value>", t))
			continue
		}
		key, value := strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1])
		switch key {
		case "policy":
			f.policies = append(f.policies, value)
		case "rule":
			f.rules = append(f.rules, value)
		case "resource":
			f.resources = append(f.resources, value)
			if value == "*" {
				stop = true
			} else if !stop {
				f.override = append(f.override, value)
			}
		default:
			errs = append(errs, fmt.Sprintf("invalid test-case-selector (%s): the key can only be policy, rule or resource", t))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return f, nil
}

func (f *Filter) keep(r TestResult) bool {
	for _, p := range f.policies {
		if r.Policy != "" && !wildcardMatch(p, r.Policy) {
			return false
		}
	}
	for _, p := range f.rules {
		if r.Rule != "" && !wildcardMatch(p, r.Rule) {
			return false
		}
	}
	for _, p := range f.resources {
		if len(r.Resources) == 0 {
			continue
		}
		ok := false
		for _, res := range r.Resources {
			if wildcardMatch(p, res) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func (f *Filter) apply(results []TestResult) []TestResult {
	if f == nil {
		return results
	}
	var out []TestResult
	for _, r := range results {
		if !f.keep(r) {
			continue
		}
		if len(f.override) > 0 {
			r.Resources = append([]string(nil), f.override...)
		}
		out = append(out, r)
	}
	return out
}

// wildcardMatch matches s against a pattern of * (any run) and ? (one character).
func wildcardMatch(pattern, s string) bool {
	p, str := []rune(pattern), []rune(s)
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(str) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == str[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// Options tune RunPaths.
type Options struct {
	// FileName is the name of test files (default kyverno-test.yaml).
	FileName string
	// Filter selects expectations (nil: all).
	Filter *Filter
	// ImageVerifier serves ImageValidatingPolicies: registry reads and
	// signature verification (nil: their results are errors).
	ImageVerifier kyvernocel.ImageVerifier
}

// Summary totals the rows of suites.
type Summary struct {
	Passed int `json:"passed"`
	Failed int `json:"failed"`
	// LoadErrors counts suites that could not be loaded.
	LoadErrors int `json:"loadErrors"`
}

// Summarize totals results.
func Summarize(results []*SuiteResult) Summary {
	var s Summary
	for _, r := range results {
		s.Passed += r.Passed
		s.Failed += r.Failed
		if r.err != nil {
			s.LoadErrors++
		}
	}
	return s
}

// RunPaths finds the test files under paths and runs every Test in them, in
// order. A test file or Test that cannot be loaded gives a SuiteResult with
// Error set; the error returned is only for paths that cannot be read.
// Each result is passed to emit (if not nil) as soon as it is ready.
func RunPaths(ctx context.Context, paths []string, opts Options, emit func(*SuiteResult)) ([]*SuiteResult, error) {
	files, err := FindTestFiles(opts.FileName, paths...)
	if err != nil {
		return nil, err
	}
	var out []*SuiteResult
	add := func(r *SuiteResult) {
		out = append(out, r)
		if emit != nil {
			emit(r)
		}
	}
	for _, f := range files {
		for _, r := range RunFileWith(ctx, f, opts) {
			add(r)
		}
	}
	return out, nil
}

// RunFile runs every Test of a test file.
func RunFile(ctx context.Context, file string, filter *Filter) []*SuiteResult {
	return RunFileWith(ctx, file, Options{Filter: filter})
}

// RunFileWith runs every Test of a test file with options (FileName is
// not used).
func RunFileWith(ctx context.Context, file string, opts Options) []*SuiteResult {
	filter := opts.Filter
	failed := func(index int, name string, err error) *SuiteResult {
		return &SuiteResult{File: file, Index: index, Name: name, Error: err.Error(), err: err}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return []*SuiteResult{failed(0, "", &LoadError{File: file, Err: err})}
	}
	docs, err := ParseTestFile(file, data)
	if err != nil {
		return []*SuiteResult{failed(0, "", err)}
	}
	var out []*SuiteResult
	for _, d := range docs {
		if len(filter.apply(d.Test.Results)) == 0 {
			// as `kyverno test`: a test with nothing to check is not run
			out = append(out, &SuiteResult{File: file, Index: d.Index, Name: d.Test.ObjectMeta.Name})
			continue
		}
		s, err := Load(d)
		if err != nil {
			out = append(out, failed(d.Index, d.Test.ObjectMeta.Name, err))
			continue
		}
		s.imageVerifier = opts.ImageVerifier
		out = append(out, Run(ctx, s, filter))
	}
	return out
}
