package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTest() (*slog.Logger, *bytes.Buffer, *clock) {
	var buf bytes.Buffer
	c := &clock{t: time.Unix(1000, 0)}
	text := slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})
	return slog.New(New(text, Options{Interval: 10 * time.Second, Now: c.now})), &buf, c
}

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	buf.Reset()
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestRepeatedErrorsLimited(t *testing.T) {
	log, buf, c := newTest()
	for i := range 1000 {
		log.Error("journal append failed", "entry", i)
	}
	got := lines(buf)
	if len(got) != 1 || !strings.Contains(got[0], "entry=0") {
		t.Fatalf("1000 identical errors in one instant logged %q, want the first only", got)
	}
	c.t = c.t.Add(9 * time.Second)
	log.Error("journal append failed", "entry", 1000)
	if got := lines(buf); len(got) != 0 {
		t.Fatalf("within the interval: %q", got)
	}
	c.t = c.t.Add(time.Second)
	log.Error("journal append failed", "entry", 1001)
	got = lines(buf)
	if len(got) != 1 || !strings.Contains(got[0], "entry=1001") || !strings.Contains(got[0], "suppressed=1000") {
		t.Fatalf("after the interval: %q, want entry 1001 with suppressed=1000", got)
	}
}

func TestKindsIndependent(t *testing.T) {
	log, buf, _ := newTest()
	log.Error("a")
	log.Error("b")
	log.Warn("a") // another level
	log.With("bookie", "b1").Error("a")
	log.With("bookie", "b2").Error("a")
	log.WithGroup("g").Error("a")
	if got := lines(buf); len(got) != 6 {
		t.Fatalf("6 distinct kinds logged %d lines: %q", len(got), got)
	}
	log.With("bookie", "b1").Error("a")
	if got := lines(buf); len(got) != 0 {
		t.Fatalf("a repeat through a derived logger passed: %q", got)
	}
}

func TestInfoNotLimited(t *testing.T) {
	log, buf, _ := newTest()
	for range 5 {
		log.Info("bookie registered")
	}
	if got := lines(buf); len(got) != 5 {
		t.Fatalf("Info lines limited: %d of 5", len(got))
	}
}
