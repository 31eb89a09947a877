package schema

//go:generate go run ../../internal/gen/cmd/schemagen -o zz_generated_builtin.go
