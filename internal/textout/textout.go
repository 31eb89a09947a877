// Package textout writes a command's text output and keeps the first write
// error, for the caller to return once it is done: output lost to a full
// disk or a closed pipe must not end in exit status 0, and checking every
// line printed would bury the format in error handling.
package textout

import (
	"fmt"
	"io"
)

// Writer writes to the io.Writer it wraps and keeps the first error that
// one returns; after it, writes do nothing and return that error.
type Writer struct {
	w   io.Writer
	err error
}

// New returns a Writer over w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

// Write implements io.Writer.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.w.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

// Printf formats as fmt.Fprintf does; its error is kept (see Err).
func (w *Writer) Printf(format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }

// Println formats as fmt.Fprintln does; its error is kept.
func (w *Writer) Println(a ...any) { _, _ = fmt.Fprintln(w, a...) }

// Print formats as fmt.Fprint does; its error is kept.
func (w *Writer) Print(a ...any) { _, _ = fmt.Fprint(w, a...) }

// Flush flushes the writer w wraps when it buffers (a tabwriter.Writer, a
// bufio.Writer) and returns Err.
func (w *Writer) Flush() error {
	if f, ok := w.w.(interface{ Flush() error }); ok && w.err == nil {
		w.err = f.Flush()
	}
	return w.err
}

// Err is the first error of a write or of Flush, or nil.
func (w *Writer) Err() error { return w.err }
