package kyvernocel

import (
	"testing"
)

func benchProgram(b *testing.B, expr string) func(map[string]any) {
	env := cachedEnv(b, false)
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		b.Fatal(iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		b.Fatal(err)
	}
	return func(act map[string]any) {
		if _, _, err := prg.Eval(act); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBind(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Bind(Offline, "")
	}
}

func BenchmarkParseImageReference(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseImageReference("registry.example.com:5000/team/app:1.2.3"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkImageRegistryExpr(b *testing.B) {
	eval := benchProgram(b, `object.spec.containers.all(c, parseImageReference(c.image).registry() == "ghcr.io")`)
	act := map[string]any{"object": map[string]any{"spec": map[string]any{"containers": []any{
		map[string]any{"image": "ghcr.io/a/b:1"}, map[string]any{"image": "ghcr.io/c/d@sha256:0123456789012345678901234567890123456789012345678901234567890123"},
	}}}}
	b.ReportAllocs()
	for b.Loop() {
		eval(act)
	}
}
