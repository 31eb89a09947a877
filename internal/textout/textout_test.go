package textout

import (
	"bytes"
	"errors"
	"testing"
	"text/tabwriter"
)

// failAfter accepts n writes, then fails.
type failAfter struct {
	n     int
	calls int
	buf   bytes.Buffer
}

var errFull = errors.New("no space left on device")

func (f *failAfter) Write(p []byte) (int, error) {
	f.calls++
	if f.calls > f.n {
		return 0, errFull
	}
	return f.buf.Write(p)
}

func TestWriterKeepsTheFirstError(t *testing.T) {
	f := &failAfter{n: 1}
	w := New(f)
	w.Printf("a %d\n", 1)
	w.Println("b")
	w.Print("c")
	if got := f.buf.String(); got != "a 1\n" {
		t.Fatalf("written %q", got)
	}
	if f.calls != 2 {
		t.Fatalf("%d writes reached the writer; none after the failed one should", f.calls)
	}
	if !errors.Is(w.Err(), errFull) || !errors.Is(w.Flush(), errFull) {
		t.Fatalf("Err %v, Flush %v", w.Err(), w.Flush())
	}
}

func TestFlushTabwriter(t *testing.T) {
	var b bytes.Buffer
	w := New(tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0))
	w.Println("A\tB")
	w.Printf("%s\t%s\n", "long", "x")
	if b.Len() != 0 {
		t.Fatalf("the tabwriter wrote before Flush: %q", b.String())
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "A     B\nlong  x\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}

	f := &failAfter{}
	w = New(tabwriter.NewWriter(f, 0, 4, 2, ' ', 0))
	w.Println("A\tB")
	if err := w.Flush(); !errors.Is(err, errFull) {
		t.Fatalf("Flush: %v", err)
	}
}

func TestNoError(t *testing.T) {
	var b bytes.Buffer
	w := New(&b)
	w.Println("x")
	if w.Err() != nil || w.Flush() != nil || b.String() != "x\n" {
		t.Fatalf("%v %q", w.Err(), b.String())
	}
}
