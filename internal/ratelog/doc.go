// Package ratelog rate-limits repeated log lines: a slog.Handler that passes the first
// record of each kind (level, message and the logger's attributes) and then at most one
// per interval, adding to it how many were dropped since the one before. A failing disk or
// an unreachable peer then costs a line every few seconds, not one per request.
//
// # Usage
//
//	h := ratelog.New(slog.NewTextHandler(os.Stderr, nil), ratelog.Options{})
//	slog.SetDefault(slog.New(h))
//
// Records below Options.MinLevel (default Warn) are never limited. A limited record that
// passes carries the attribute "suppressed" (records of its kind dropped since the last one
// passed), when nonzero.
//
// # Concurrency
//
// A Handler is safe for concurrent use; handlers derived with WithAttrs and WithGroup share
// their parent's state (one mutex, a leaf). No goroutines.
package ratelog
