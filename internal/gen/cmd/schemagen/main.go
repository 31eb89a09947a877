// Command schemagen writes engine/schema's generated built-in schemas (see
// package internal/gen/schemagen). Run it with `go generate ./engine/schema`
// or `make generate`; it must be run with `go run` from this module, so that
// the client-go it links is the one of go.mod.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/arbiter-pdp/arbiter/internal/gen/schemagen"
)

func main() {
	out := flag.String("o", "", "output file (default: standard output)")
	flag.Parse()
	src, err := schemagen.Generate("")
	if err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
	if *out == "" {
		_, err = os.Stdout.Write(src)
	} else {
		err = os.WriteFile(*out, src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}
