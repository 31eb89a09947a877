package kyvernotest

import (
	"fmt"
	"os"
	"path/filepath"
)

// FindTestFiles returns the test files under paths, in the order `kyverno
// test` visits them: a folder is walked recursively in lexical order,
// hidden folders (such as .kyverno-test) included, for files named
// fileName; a path that is a file is taken as a test file whatever its name.
func FindTestFiles(fileName string, paths ...string) ([]string, error) {
	if fileName == "" {
		fileName = DefaultFileName
	}
	var out []string
	for _, p := range paths {
		p = filepath.Clean(p)
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			out = append(out, p)
			continue
		}
		found, err := walkTests(p, fileName, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

const maxDepth = 64

func walkTests(dir, fileName string, depth int) ([]string, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%s: folders nested too deeply", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if e.IsDir() {
			found, err := walkTests(p, fileName, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, found...)
		} else if e.Name() == fileName {
			out = append(out, p)
		}
	}
	return out, nil
}
