package main

import (
	"bytes"
	"io"
	"strings"
	"text/tabwriter"
)

// table aligns tab-separated cells in columns two spaces apart, as
// tabwriter does, without the padding tabwriter leaves at the end of a line
// whose last cells are empty (a member's empty REASON).
type table struct {
	out io.Writer
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func newTable(w io.Writer) *table {
	t := &table{out: w}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	return t
}

func (t *table) Write(p []byte) (int, error) { return t.tw.Write(p) }

// Flush writes the aligned lines to the output.
func (t *table) Flush() error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	for line := range strings.Lines(t.buf.String()) {
		b.WriteString(strings.TrimRight(line, " \n"))
		b.WriteByte('\n')
	}
	t.buf.Reset()
	_, err := io.WriteString(t.out, b.String())
	return err
}
